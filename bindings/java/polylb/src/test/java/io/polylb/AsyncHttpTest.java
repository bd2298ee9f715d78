package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLongArray;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * callAsync over real sockets: java.net.http's sendAsync against three local HTTP providers — a
 * fast one, a slow one and one that answers 503 at once — through the recommended latency
 * configuration. The fast provider should carry the calls; the failing one must not attract them
 * by answering fast; every call ends, and none stays in flight. The client is not warmed up: its
 * first requests pay its start-up (hundreds of ms of class loading), which must not price the
 * fast provider as slow for long (it did for about 10 s before peakewma let a later, faster
 * answer replace such first answers: examples/coldstart.rs).
 */
class AsyncHttpTest {
    private static final int FAST = 1;
    private static final int SLOW = 2;
    private static final int FAILING = 3;
    /**
     * The slow provider's delay. Far beyond what the fast one takes even on a loaded machine: there
     * its answers took 36 ms on average and its peak estimate reached 56–354 ms (the JDK's client and
     * server waiting for a CPU), and at 200 ms a fourth call in flight on it priced the same as
     * the slow provider (56 ms × 4), which then served 36–122 of 300 calls.
     */
    private static final long SLOW_MS = 1000;

    static {
        // The JDK server writes headers and body apart; with Nagle's algorithm on, a response
        // can wait for the client's delayed ACK (~40 ms), which makes the fast provider look slow.
        System.setProperty("sun.net.httpserver.nodelay", "true");
    }

    private final List<HttpServer> servers = new ArrayList<>();
    private final AtomicLongArray served = new AtomicLongArray(4);
    private ExecutorService handlers;

    @AfterEach
    void stop() {
        servers.forEach(s -> s.stop(0));
        if (handlers != null) {
            handlers.shutdownNow();
        }
    }

    private InetSocketAddress provider(int id, int status, long delayMs) throws IOException {
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/hello", exchange -> {
            served.incrementAndGet(id);
            try {
                Thread.sleep(delayMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            byte[] body = ("hello from " + id).getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(status, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.setExecutor(handlers);
        server.start();
        servers.add(server);
        return server.getAddress();
    }

    @Test
    void theFastProviderCarriesTheCallsAndTheFailingOneIsAvoided() throws Exception {
        handlers = Executors.newFixedThreadPool(8);
        List<InetSocketAddress> addresses = List.of(
                provider(FAST, 200, 0), provider(SLOW, 200, SLOW_MS), provider(FAILING, 503, 0));
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        try (Balancer lb = new Balancer("loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000")) {
            List<Invoker> invokers = new ArrayList<>();
            for (int id = 1; id <= 3; id++) {
                InetSocketAddress a = addresses.get(id - 1);
                invokers.add(Invoker.of(id, a.getHostString() + ":" + a.getPort()));
            }
            lb.update(invokers);
            int hello = lb.method("hello");

            int calls = 300;
            // At most 4 calls in flight, as a client with a few requests at a time: each call
            // starts when one ends (a slow answer holds one slot, not a whole batch).
            Semaphore window = new Semaphore(4);
            List<CompletableFuture<String>> replies = new ArrayList<>();
            for (int i = 0; i < calls; i++) {
                window.acquire();
                CompletableFuture<String> reply = lb.callAsync(hello, null, id -> {
                    InetSocketAddress a = addresses.get((int) id - 1);
                    HttpRequest request = HttpRequest.newBuilder(
                            URI.create("http://127.0.0.1:" + a.getPort() + "/hello")).build();
                    return http.sendAsync(request, HttpResponse.BodyHandlers.ofString())
                            .thenApply(response -> {
                                if (response.statusCode() >= 500) { // the provider failed
                                    throw new CompletionException(new IOException("HTTP " + response.statusCode()));
                                }
                                return response.body();
                            })
                            .orTimeout(5, TimeUnit.SECONDS);
                });
                reply.whenComplete((body, error) -> window.release());
                replies.add(reply);
            }
            int ok = 0;
            int failed = 0;
            long[] answeredBy = new long[4];
            for (CompletableFuture<String> reply : replies) {
                try {
                    String body = reply.get(30, TimeUnit.SECONDS);
                    answeredBy[Integer.parseInt(body.substring("hello from ".length()))]++;
                    ok++;
                } catch (ExecutionException providerFailed) {
                    failed++;
                }
            }
            String stats = lb.statsJson();
            assertEquals(calls, ok + failed);
            assertEquals(calls, served.get(FAST) + served.get(SLOW) + served.get(FAILING), stats);
            assertEquals(served.get(FAILING), failed, "every 503 was reported a failure");
            // A provider failing fast is tried, then probed with back-off: a few calls, not a
            // third of them (which a least-loaded pick would give it: it always looks idle).
            assertTrue(served.get(FAILING) <= calls / 20, "failing provider served " + served.get(FAILING) + ": " + stats);
            // A second against a few ms: the slow provider takes probes and spill-over only.
            assertTrue(served.get(SLOW) <= calls / 10, "slow provider served " + served.get(SLOW) + ": " + stats);
            assertTrue(answeredBy[FAST] >= calls * 8 / 10, "fast provider answered " + answeredBy[FAST] + ": " + stats);
            assertFalse(stats.matches("(?s).*\"active\":[1-9].*"), "a call left in flight: " + stats);
        }
    }
}
