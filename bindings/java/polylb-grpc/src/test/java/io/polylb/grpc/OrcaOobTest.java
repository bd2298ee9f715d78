package io.polylb.grpc;

import static io.polylb.grpc.Client.eventually;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import io.grpc.EquivalentAddressGroup;
import io.grpc.HandlerRegistry;
import io.grpc.ServerMethodDefinition;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * ORCA's out-of-band load reports ({@code "enableOobLoadReport": true}) feeding {@code orca}:
 * real servers on loopback serving {@link OrcaOobServer}, and no per-call trailers unless a test
 * says so.
 */
class OrcaOobTest {
    private static final String ORCA = "loadbalance=orca&orca.blackoutMs=0";
    private final List<AutoCloseable> toClose = new ArrayList<>();

    @AfterEach
    void closeAll() throws Exception {
        for (int i = toClose.size() - 1; i >= 0; i--) {
            toClose.get(i).close();
        }
    }

    /** A provider serving the echo service and ORCA's out-of-band service. */
    /** An ORCA service reporting 100 qps, no errors, at this utilization (capacity 100 / it). */
    private static OrcaOobServer reporting(double utilization) {
        OrcaOobServer oob = new OrcaOobServer();
        oob.load.set(new double[] {100, 0, utilization});
        return oob;
    }

    private Provider withOob(String name, OrcaOobServer oob) throws Exception {
        toClose.add(oob);
        Provider provider = new Provider(name, NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
                .addService(oob.service()));
        toClose.add(provider);
        return provider;
    }

    private Client client(Map<String, ?> entry, List<EquivalentAddressGroup> endpoints) {
        Client client = new Client(entry, endpoints);
        toClose.add(client);
        return client;
    }

    private static Map<String, Object> entry(String config, boolean oob, String period) {
        Map<String, Object> entry = new HashMap<>();
        entry.put("config", config);
        entry.put("enableOobLoadReport", oob);
        if (period != null) {
            entry.put("oobReportingPeriod", period);
        }
        return entry;
    }

    /** As {@link Client#eventually}, within {@code ms}. */
    private static void within(long ms, BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("not within " + ms + " ms: " + what);
            }
            Thread.sleep(5);
        }
    }

    /** Each provider's endpoint row in the stats, by the provider's port. */
    private static JsonObject row(Client client, Provider provider) {
        String address = "127.0.0.1:" + ((InetSocketAddress) provider.endpoint().getAddresses().get(0)).getPort();
        for (JsonElement row : client.stats().getAsJsonArray("invokers")) {
            if (row.getAsJsonObject().get("address").getAsString().equals(address)) {
                return row.getAsJsonObject();
            }
        }
        throw new AssertionError("no row for " + address + " in " + client.stats());
    }


    @Test
    void outOfBandReportsWeighTheEndpoints() throws Exception {
        List<OrcaOobServer> oob = List.of(new OrcaOobServer(), new OrcaOobServer(), new OrcaOobServer());
        // rps_fractional, eps, application_utilization: capacities 200, 400 and 100, as in the
        // per-call test (orcaLoadReportsWeighTheEndpointsForOrca); here no call has a trailer.
        oob.get(0).load.set(new double[] {100, 0, 0.5});
        oob.get(1).load.set(new double[] {100, 0, 0.25});
        oob.get(2).load.set(new double[] {100, 50, 0.5});
        List<Provider> p = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            p.add(withOob("p" + i, oob.get(i)));
        }
        Client client = client(entry(ORCA, true, "0.050s"), p.stream().map(Provider::endpoint).toList());
        client.waitForSet(3);
        for (OrcaOobServer server : oob) {
            eventually(() -> server.opened.get() == 1, "a stream per endpoint");
            assertEquals(TimeUnit.MILLISECONDS.toNanos(50), server.requestedNanos.get(), "the interval asked for");
        }
        long start = System.nanoTime();
        client.untilOrcaWeighted();
        long weighted = System.nanoTime();
        double[] expected = {200, 400, 100};
        for (int n = 0; n < 3; n++) {
            assertEquals(expected[n], row(client, p.get(n)).get("orca_weight").getAsDouble(), client.stats().toString());
        }
        int[] before = {p.get(0).calls.get(), p.get(1).calls.get(), p.get(2).calls.get()};
        for (int i = 0; i < 700; i++) {
            client.call("");
        }
        for (int n = 0; n < 3; n++) {
            int got = p.get(n).calls.get() - before[n];
            // Dealt in turn by the stride schedule, not drawn: each share within a few calls
            // (the schedule is rebuilt each second from the same weights), as for the trailers.
            assertTrue(Math.abs(got - expected[n]) <= 10, "provider " + n + " got " + got
                    + " of 700, expected " + expected[n]);
        }
        System.out.println("outOfBandReportsWeighTheEndpoints: weighted after "
                + TimeUnit.NANOSECONDS.toMillis(weighted - start) + " ms, 700 calls in "
                + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - weighted) + " ms");
        for (OrcaOobServer server : oob) {
            assertTrue(server.reports.get() >= 2, "reports kept coming: " + server.reports.get());
            assertEquals(1, server.opened.get(), "one stream per endpoint, kept open");
            assertEquals(0, server.cancelled.get());
        }
    }

    @Test
    void theCallsTrailersAreIgnoredWhileOutOfBandReportsFeedOrca() throws Exception {
        OrcaOobServer oob0 = reporting(0.5); // out of band: 200 and 400
        OrcaOobServer oob1 = reporting(0.25);
        Provider p0 = withOob("p0", oob0);
        Provider p1 = withOob("p1", oob1);
        p0.load.set(new double[] {100, 0, 0.25}); // the trailers say the opposite: 400 and 200
        p1.load.set(new double[] {100, 0, 0.5});
        Client client = client(entry(ORCA, true, "0.05s"), List.of(p0.endpoint(), p1.endpoint()));
        client.waitForSet(2);
        client.untilOrcaWeighted();
        for (int i = 0; i < 100; i++) {
            client.call(""); // 100 trailers, against a report each 50 ms
        }
        assertEquals(200, row(client, p0).get("orca_weight").getAsDouble(), client.stats().toString());
        assertEquals(400, row(client, p1).get("orca_weight").getAsDouble(), client.stats().toString());
    }

    @Test
    void offByDefaultNoStreamOpens() throws Exception {
        OrcaOobServer oob0 = reporting(0.5);
        OrcaOobServer oob1 = reporting(0.25);
        Provider p0 = withOob("p0", oob0);
        Provider p1 = withOob("p1", oob1);
        Map<String, Object> off = new HashMap<>();
        off.put("config", ORCA);
        Client client = client(off, List.of(p0.endpoint(), p1.endpoint()));
        client.waitForSet(2);
        for (int i = 0; i < 20; i++) {
            client.call("");
        }
        assertEquals(0, oob0.opened.get() + oob1.opened.get(), "streams opened without the option");
        assertTrue(Math.abs(p0.calls.get() - 10) <= 1, "without reports orca deals the configured weights in turn: "
                + p0.calls.get());

        // The same channel with the option turned on by the resolver's config: one stream each.
        client.resolver.setServiceConfig(client.serviceConfig(entry(ORCA, true, "0.05s")));
        eventually(() -> oob0.opened.get() == 1 && oob1.opened.get() == 1, "a stream per endpoint");
        client.untilOrcaWeighted();
        assertEquals(400, row(client, p1).get("orca_weight").getAsDouble(), client.stats().toString());

        // And off again: the streams are cancelled.
        client.resolver.setServiceConfig(client.serviceConfig(entry(ORCA, false, "0.05s")));
        within(3000, () -> oob0.cancelled.get() == 1 && oob1.cancelled.get() == 1, "the streams cancelled");
        assertEquals(2, oob0.opened.get() + oob1.opened.get());
    }

    @Test
    void aConfigChangeKeepsTheStreamsUnlessThePeriodChanges() throws Exception {
        OrcaOobServer oob0 = reporting(0.5);
        OrcaOobServer oob1 = reporting(0.25);
        Provider p0 = withOob("p0", oob0);
        Provider p1 = withOob("p1", oob1);
        Client client = client(entry(ORCA, true, "0.05s"), List.of(p0.endpoint(), p1.endpoint()));
        client.waitForSet(2);
        eventually(() -> oob0.opened.get() == 1 && oob1.opened.get() == 1, "a stream per endpoint");
        client.untilOrcaWeighted();

        // Another config string, the same out-of-band settings: a new balancer, fed by the same streams.
        var first = client.balancer.get();
        client.resolver.setServiceConfig(client.serviceConfig(entry(ORCA + "&orca.updateMs=500", true, "0.05s")));
        eventually(() -> client.balancer.get() != first && client.setSize() == 2, "the new balancer");
        client.untilOrcaWeighted();
        assertEquals(400, row(client, p1).get("orca_weight").getAsDouble(), client.stats().toString());
        assertEquals(1, oob0.opened.get() + oob0.cancelled.get(), "the stream was kept");
        assertEquals(1, oob1.opened.get() + oob1.cancelled.get(), "the stream was kept");

        // Another period: the streams open again asking for it (a server stream's request is final).
        client.resolver.setServiceConfig(client.serviceConfig(entry(ORCA + "&orca.updateMs=500", true, "0.1s")));
        eventually(() -> oob0.opened.get() == 2 && oob1.opened.get() == 2, "the streams opened again");
        within(3000, () -> oob0.cancelled.get() == 1 && oob1.cancelled.get() == 1, "the old streams cancelled");
        assertEquals(TimeUnit.MILLISECONDS.toNanos(100), oob0.requestedNanos.get());
        assertEquals(TimeUnit.MILLISECONDS.toNanos(100), oob1.requestedNanos.get());
    }

    @Test
    void otherStrategiesOpenNoStream() throws Exception {
        OrcaOobServer oob0 = new OrcaOobServer();
        OrcaOobServer oob1 = new OrcaOobServer();
        Provider p0 = withOob("p0", oob0);
        Provider p1 = withOob("p1", oob1);
        Client client = client(entry("loadbalance=roundrobin", true, "0.05s"), List.of(p0.endpoint(), p1.endpoint()));
        client.waitForSet(2);
        for (int i = 0; i < 20; i++) {
            client.call("");
        }
        assertEquals(10, p0.calls.get());
        assertEquals(0, oob0.opened.get() + oob1.opened.get(), "roundrobin opened ORCA streams");

        client.resolver.setServiceConfig(client.serviceConfig(entry(ORCA, true, "0.05s")));
        eventually(() -> oob0.opened.get() == 1 && oob1.opened.get() == 1, "orca's streams");
    }

    @Test
    void aServerWithoutOrcaIsAskedOnce() throws Exception {
        // Servers without the ORCA service: their fallback registry counts the attempts and
        // answers none (UNIMPLEMENTED).
        List<AtomicInteger> attempts = List.of(new AtomicInteger(), new AtomicInteger());
        List<Provider> p = new ArrayList<>();
        for (AtomicInteger counter : attempts) {
            Provider provider = new Provider("plain", NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
                    .fallbackHandlerRegistry(new HandlerRegistry() {
                        @Override
                        public ServerMethodDefinition<?, ?> lookupMethod(String method, String authority) {
                            if (method.equals(OrcaOobServer.FULL_METHOD_NAME)) {
                                counter.incrementAndGet();
                            }
                            return null;
                        }
                    }));
            toClose.add(provider);
            p.add(provider);
        }
        Client client = client(entry(ORCA, true, "0.05s"), p.stream().map(Provider::endpoint).toList());
        client.waitForSet(2);
        eventually(() -> attempts.get(0).get() == 1 && attempts.get(1).get() == 1, "one attempt per endpoint");
        // Past the first backoff (1 s ± 20 %) a retry would have come: calls go on meanwhile.
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1500);
        int calls = 0;
        while (System.nanoTime() < end) {
            client.call("");
            calls++;
        }
        assertEquals(List.of(1, 1), attempts.stream().map(AtomicInteger::get).toList(), "attempts after " + calls + " calls");
        assertTrue(Math.abs(p.get(0).calls.get() - p.get(1).calls.get()) <= 1, "the configured weights deal the calls");
        assertEquals(calls, client.total("succeeded"));
    }

    @Test
    void aStreamThatEndsOpensAgain() throws Exception {
        OrcaOobServer oob = new OrcaOobServer();
        oob.load.set(new double[] {100, 0, 0.5});
        oob.endAfter = 2; // each stream ends (OK) after its second report
        Provider p0 = withOob("p0", oob);
        client(entry(ORCA, true, "0.05s"), List.of(p0.endpoint())).waitForSet(1);
        // A stream that brought reports opens again at once, without a backoff.
        within(2000, () -> oob.opened.get() >= 4, "reopened streams: " + oob.opened.get());
    }

    @Test
    void aFailedStreamOpensAgainAfterABackoff() throws Exception {
        OrcaOobServer oob = new OrcaOobServer();
        OrcaOobServer other = new OrcaOobServer();
        oob.load.set(new double[] {100, 0, 0.5});
        other.load.set(new double[] {100, 0, 0.25});
        oob.failNext.set(1); // the first stream fails before any report
        Provider p0 = withOob("p0", oob);
        Provider p1 = withOob("p1", other);
        Client client = client(entry(ORCA, true, "0.05s"), List.of(p0.endpoint(), p1.endpoint()));
        client.waitForSet(2);
        eventually(() -> oob.opened.get() == 1, "the first stream");
        long first = oob.lastOpenedNanos.get();
        within(5000, () -> oob.opened.get() == 2, "the second stream");
        long gapMs = TimeUnit.NANOSECONDS.toMillis(oob.lastOpenedNanos.get() - first);
        // 1 s ± 20 %; the next backoff would be 1.6 s ± 20 %, and a timer late under load no less.
        assertTrue(gapMs >= 750 && gapMs <= 2500, "opened again after " + gapMs + " ms, the backoff is 1 s ± 20 %");
        client.untilOrcaWeighted();
        assertEquals(200, row(client, p0).get("orca_weight").getAsDouble(), client.stats().toString());
    }

    @Test
    void streamsAreCancelledWhenTheirEndpointLeavesAndWhenThePolicyShutsDown() throws Exception {
        OrcaOobServer oob0 = new OrcaOobServer();
        OrcaOobServer oob1 = new OrcaOobServer();
        Provider p0 = withOob("p0", oob0);
        Provider p1 = withOob("p1", oob1);
        Client client = client(entry(ORCA, true, "0.05s"), List.of(p0.endpoint(), p1.endpoint()));
        client.waitForSet(2);
        eventually(() -> oob0.opened.get() == 1 && oob1.opened.get() == 1, "a stream per endpoint");
        // gRPC shuts a subchannel the policy drops down 5 s later, and gracefully (its open
        // streams go on): within 3 s only the policy's own cancel ends the stream.
        client.resolver.setEndpoints(List.of(p1.endpoint()));
        within(3000, () -> oob0.cancelled.get() == 1, "the dropped endpoint's stream cancelled");
        assertEquals(0, oob1.cancelled.get(), "the listed endpoint's stream goes on");
        client.channel.enterIdle(); // shuts the policy down
        within(3000, () -> oob1.cancelled.get() == 1, "the stream cancelled at the policy's shutdown");
        assertEquals(1, oob0.opened.get());
        assertEquals(1, oob1.opened.get());
    }
}
