package io.polylb.spring;

import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import org.springframework.cloud.client.DefaultServiceInstance;
import org.springframework.cloud.client.ServiceInstance;

/** A local HTTP server answering every request with a fixed status after a fixed delay. */
final class Backend implements AutoCloseable {
    final String name;
    final AtomicInteger hits = new AtomicInteger();
    private final HttpServer server;
    private final ExecutorService pool = Executors.newFixedThreadPool(64);
    volatile int status;
    volatile long delayMs;

    Backend(String name, int status, long delayMs) throws IOException {
        this.name = name;
        this.status = status;
        this.delayMs = delayMs;
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 128);
        server.createContext("/", exchange -> {
            hits.incrementAndGet();
            try {
                if (this.delayMs > 0) {
                    Thread.sleep(this.delayMs);
                }
                byte[] body = name.getBytes(StandardCharsets.UTF_8);
                exchange.sendResponseHeaders(this.status, body.length);
                exchange.getResponseBody().write(body);
            } catch (InterruptedException | IOException gone) {
                // the client went away
            } finally {
                exchange.close();
            }
        });
        server.setExecutor(pool);
        server.start();
    }

    int port() {
        return server.getAddress().getPort();
    }

    String address() {
        return "127.0.0.1:" + port();
    }

    ServiceInstance instance(String serviceId, Map<String, String> metadata) {
        return new DefaultServiceInstance(name, serviceId, "127.0.0.1", port(), false, metadata);
    }

    ServiceInstance instance(String serviceId) {
        return instance(serviceId, Map.of());
    }

    @Override
    public void close() {
        server.stop(0);
        pool.shutdownNow();
    }
}
