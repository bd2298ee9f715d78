package io.polylb.grpc;

import static io.polylb.grpc.Client.eventually;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.common.util.concurrent.ListenableFuture;
import io.grpc.CallOptions;
import io.grpc.EquivalentAddressGroup;
import io.grpc.stub.ClientCalls;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Paths gRPC takes beside a plain call: retries, reconnects, resolution. */
class GrpcPathsTest {
    private final List<AutoCloseable> toClose = new ArrayList<>();

    @AfterEach
    void closeAll() throws Exception {
        for (int i = toClose.size() - 1; i >= 0; i--) {
            toClose.get(i).close();
        }
    }

    private Provider provider(String name) throws Exception {
        Provider provider = new Provider(name);
        toClose.add(provider);
        return provider;
    }

    private Client client(String config, List<EquivalentAddressGroup> endpoints, Map<String, ?> moreConfig) {
        Client client = new Client(config, false, endpoints, true, moreConfig);
        toClose.add(client);
        return client;
    }

    /** A retry policy on UNAVAILABLE whose backoff (0 to 1000 s, uniform) outlasts the test. */
    private static final Map<String, ?> SLOW_RETRY = Map.of("methodConfig", List.of(Map.of(
            "name", List.of(Map.of("service", EchoService.SERVICE)),
            "retryPolicy", Map.of(
                    "maxAttempts", 2.0,
                    "initialBackoff", "1000s",
                    "maxBackoff", "1000s",
                    "backoffMultiplier", 1.0,
                    "retryableStatusCodes", List.of("UNAVAILABLE")))));

    /**
     * gRPC picks for a retry attempt when it decides to retry, then waits out the backoff before
     * starting its stream (RetriableStream: createSubstream, then the scheduled drain). A call
     * cancelled meanwhile (its cancel, its deadline, the channel's shutdownNow) never starts it:
     * the pick's stream is neither started nor closed.
     */
    @Test
    void aRetryAttemptTheCallNeverStartsIsNotInFlightForGood() throws Exception {
        Provider p = provider("p0");
        Client client = client("loadbalance=leastactive", List.of(p.endpoint()), SLOW_RETRY);
        client.waitForSet(1);
        ListenableFuture<String> future = ClientCalls.futureUnaryCall(
                client.channel.newCall(EchoService.CALL, CallOptions.DEFAULT.withWaitForReady()),
                "status:UNAVAILABLE");
        // The first attempt failed and was reported; the retry is picked, waiting out its backoff.
        eventually(() -> client.total("failures") == 1 && client.total("active") == 1, "the retry's pick");
        assertEquals(1, p.calls.get(), "the retry went out already (backoff under a second)");
        assertTrue(future.cancel(true));
        eventually(() -> {
            System.gc();
            return client.total("active") == 0;
        }, "the retry's pick undone: " + client.stats());
        assertEquals(1, client.total("failures"));
        assertEquals(0, client.total("succeeded"));
    }

    /**
     * gRPC-java's resolvers (DNS among them) resolve again only when the policy asks, as
     * pick_first and round_robin do when a connection closes or fails: without it, a channel
     * over DNS never learns that its providers moved.
     */
    @Test
    void aClosedConnectionAsksTheResolverAgain() throws Exception {
        Provider p = provider("p0");
        Client client = client("loadbalance=random", List.of(p.endpoint()), Map.of());
        client.waitForSet(1);
        client.call("");
        int before = client.resolver.refreshes.get();
        p.kill(); // READY, then IDLE, then failing to connect
        eventually(() -> client.resolver.refreshes.get() > before, "a refresh of the resolution");
    }

    /**
     * An endpoint keeps its state while the resolver lists it, also while its connection is
     * down: a provider whose connections are recycled (GOAWAY, maxConnectionAge) or flap keeps
     * its latency estimates, its outlier-ejection record and the calls still running on the
     * old connection.
     */
    @Test
    void anEndpointKeepsItsStateAcrossAReconnect() throws Exception {
        Provider p0 = provider("p0");
        Provider p1 = provider("p1");
        java.net.InetSocketAddress address0 = (java.net.InetSocketAddress) p0.endpoint().getAddresses().get(0);
        Client client = client("loadbalance=roundrobin", List.of(p0.endpoint(), p1.endpoint()), Map.of());
        client.waitForSet(2);
        for (int i = 0; i < 20; i++) {
            client.call("");
        }
        eventually(() -> succeeded(client, address0) == 10, "10 calls reported on p0: " + client.stats());
        p0.kill();
        eventually(() -> client.readyEndpoints() == 1, "p0 seen down");
        // Calls go on over p1 alone while p0 is down.
        for (int i = 0; i < 5; i++) {
            assertEquals("p1", client.call(""));
        }
        Provider back = new Provider("p0 again", io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder.forAddress(
                new java.net.InetSocketAddress("127.0.0.1", address0.getPort())));
        toClose.add(back);
        eventually(() -> {
            client.call("");
            return back.calls.get() > 0;
        }, "p0 reconnected");
        assertTrue(succeeded(client, address0) >= 10, "p0's state was dropped on its reconnect: " + client.stats());
    }

    private static long succeeded(Client client, java.net.InetSocketAddress address) {
        for (com.google.gson.JsonElement invoker : client.stats().getAsJsonArray("invokers")) {
            com.google.gson.JsonObject fields = invoker.getAsJsonObject();
            if (fields.get("address").getAsString().equals("127.0.0.1:" + address.getPort())) {
                return fields.get("succeeded").getAsLong();
            }
        }
        return -1;
    }

    /**
     * An idle channel (no call for idleTimeout, 30 minutes by default, or enterIdle()) shuts its
     * policy down, closing its balancer, and builds another for the next call.
     */
    @Test
    void leavingIdleModeBringsANewBalancer() throws Exception {
        Provider p = provider("p0");
        Client client = client("loadbalance=random", List.of(p.endpoint()), Map.of());
        client.waitForSet(1);
        client.call("");
        io.polylb.Balancer first = client.balancer.get();
        client.channel.enterIdle();
        eventually(first::isClosed, "the idle channel's balancer closed");
        assertEquals("p0", client.call(""));
        assertTrue(client.balancer.get() != first);
        eventually(() -> client.total("succeeded") == 1 && client.total("active") == 0, "the new balancer's report");
    }
}
