package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonParser;
import io.polylb.Balancer;
import io.polylb.PolylbException;
import io.polylb.Status;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.dubbo.remoting.TimeoutException;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.model.ApplicationModel;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A real Dubbo consumer calling three real Dubbo providers (dubbo protocol, 127.0.0.1 only, direct
 * URLs, no registry) through the polylb LoadBalance. Each provider and the consumer live in their
 * own FrameworkModel, as separate processes would.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class DubboEndToEndTest {
    static final String[] NAMES = {"A", "B", "C"};
    /** callId -> providers that served an attempt of it, in order. */
    static final Map<String, List<String>> ATTEMPTS = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> CALLS = new ConcurrentHashMap<>();
    /** Extra latency per provider name, ms. */
    static final Map<String, Integer> EXTRA_DELAY_MS = new ConcurrentHashMap<>();

    public static final class NamedEcho implements EchoService {
        private final String name;

        NamedEcho(String name) {
            this.name = name;
        }

        private void record(String callId) {
            ATTEMPTS.computeIfAbsent(callId, k -> Collections.synchronizedList(new ArrayList<>())).add(name);
            CALLS.computeIfAbsent(name, k -> new AtomicInteger()).incrementAndGet();
        }

        @Override
        public String work(String callId, int delayMs) {
            record(callId);
            sleep(delayMs + EXTRA_DELAY_MS.getOrDefault(name, 0));
            return name;
        }

        @Override
        public String slowOn(String slowProvider, String callId, int sleepMs) {
            record(callId);
            if (name.equals(slowProvider)) {
                sleep(sleepMs);
            }
            return name;
        }

        private static void sleep(int ms) {
            if (ms <= 0) {
                return;
            }
            try {
                Thread.sleep(ms);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    @RegisterExtension
    static final InJvmProviders<EchoService> PROVIDERS =
            new InJvmProviders<>(EchoService.class, "provider-", NAMES, NamedEcho::new);

    /** A consumer in its own FrameworkModel; returns the proxy and its bootstrap (to stop). */
    private static Consumer consumer(String loadbalance, int timeoutMs, int retries) {
        return consumer(loadbalance, timeoutMs, retries, false);
    }

    private static Consumer consumer(String loadbalance, int timeoutMs, int retries, boolean async) {
        return new Consumer(loadbalance, timeoutMs, retries, async);
    }

    static final class Consumer extends DirectConsumer<EchoService> {
        final EchoService echo;

        Consumer(String loadbalance, int timeoutMs, int retries, boolean async) {
            super("consumer-" + loadbalance, EchoService.class, PROVIDERS.directUrls(), loadbalance, retries,
                    timeoutMs, async);
            this.echo = reference.get();
        }

        /** The consumer's own LoadBalance extension of that name. */
        PolylbLoadBalance extension(String loadbalance) {
            ApplicationModel app = bootstrap.getApplicationModel();
            return (PolylbLoadBalance) app.getExtensionLoader(LoadBalance.class).getExtension(loadbalance);
        }

        /** polylb's stats for the service, from the consumer's own LoadBalance extension. */
        List<String> stats(String loadbalance) {
            return extension(loadbalance).statsJson(EchoService.class.getName());
        }
    }

    @Test
    void failoverNeverRetriesTheProviderThatTimedOut() {
        // The slow provider sleeps 1500 ms against a 500 ms timeout; fast ones answer in ~1 ms,
        // far below the timeout even on a loaded machine.
        try (Consumer consumer = consumer("polylb-roundrobin", 500, 2)) {
            int failovers = 0;
            // Call ids of this run's own: ATTEMPTS is static, and a repeat in the same JVM (an
            // IDE's "repeat", a launcher) would add to an earlier run's lists.
            String run = "failover-" + System.nanoTime() + "-";
            for (int i = 0; i < 24; i++) {
                // Blocks of three calls share a slow provider, so round robin meets it in every block.
                String slow = NAMES[(i / 3) % 3];
                String callId = run + i;
                String servedBy = consumer.echo.slowOn(slow, callId, 1500);
                List<String> attempts = ATTEMPTS.get(callId);
                assertNotEquals(slow, servedBy, "call " + callId + " attempts " + attempts);
                assertEquals(attempts.size(), attempts.stream().distinct().count(),
                        "a failover retried a provider it had tried: " + attempts);
                if (attempts.size() > 1) {
                    failovers++;
                }
            }
            assertTrue(failovers >= 4, "round robin must have hit the slow provider first sometimes: " + failovers);
            awaitNoneInFlight(consumer, "polylb-roundrobin");
        }
    }

    @Test
    void aDestroyedReferencesStateIsFreed() throws Exception {
        // Dubbo tells a LoadBalance nothing when a reference is destroyed; the sweep sees that
        // every invoker it knows for the service was destroyed with the reference's directory.
        String before = System.getProperty(PolylbLoadBalance.SWEEP_PERIOD_KEY);
        System.setProperty(PolylbLoadBalance.SWEEP_PERIOD_KEY, "50");
        try (Consumer consumer = consumer("polylb-leastactive", 2000, 0)) {
            for (int i = 0; i < 6; i++) {
                consumer.echo.work("sweep-" + i, 0);
            }
            PolylbLoadBalance lb = consumer.extension("polylb-leastactive");
            assertEquals(1, lb.serviceCount());
            Thread.sleep(300); // several sweeps while the reference lives: its state stays
            assertEquals(1, lb.serviceCount(), "a live reference's state was freed");
            consumer.reference.destroy();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (lb.serviceCount() > 0 && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertEquals(0, lb.serviceCount(), "the destroyed reference's state is still held");
        } finally {
            if (before == null) {
                System.clearProperty(PolylbLoadBalance.SWEEP_PERIOD_KEY);
            } else {
                System.setProperty(PolylbLoadBalance.SWEEP_PERIOD_KEY, before);
            }
        }
    }

    @Test
    void asyncTimeoutsAreReportedAsTimeouts() throws Exception {
        // An async call's timeout reaches the filter as a CompletionException around Dubbo's
        // remoting TimeoutException, not as the RpcException a sync call throws.
        try (Consumer consumer = consumer("polylb-roundrobin", 300, 0, true)) {
            List<CompletableFuture<Object>> calls = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                consumer.echo.work("async-timeout-" + i, 1500); // async: returns null at once
                calls.add(RpcContext.getServiceContext().getCompletableFuture());
            }
            for (CompletableFuture<Object> call : calls) {
                ExecutionException e = assertThrows(ExecutionException.class, () -> call.get(10, TimeUnit.SECONDS));
                assertTrue(e.getCause() instanceof RpcException && ((RpcException) e.getCause()).isTimeout()
                        || e.getCause() instanceof TimeoutException, e.toString());
            }
            awaitNoneInFlight(consumer, "polylb-roundrobin");
            List<String> stats = consumer.stats("polylb-roundrobin");
            assertEquals(3, sum(stats, "timeouts"), stats.toString());
        }
    }

    /** A per-invoker counter of polylb's stats, summed over the service's balancers and invokers. */
    private static int sum(List<String> stats, String counter) {
        int total = 0;
        for (String json : stats) {
            for (JsonElement m : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                total += m.getAsJsonObject().get(counter).getAsInt();
            }
        }
        return total;
    }

    @Test
    void adaptiveGetsProviderLoadAndBalancesEndToEnd() throws Exception {
        // Providers answer the lb_adaptive request with curTime/load (Dubbo's ProfilerServerFilter).
        try (Consumer consumer = consumer("polylb-adaptive", 2000, 0)) {
            Map<String, AtomicInteger> served = runConcurrently(consumer, "adaptive-", 3, 40);
            int total = count(served, "A") + count(served, "B") + count(served, "C");
            assertEquals(120, total, served.toString());
            awaitNoneInFlight(consumer, "polylb-adaptive");
        }
    }

    @Test
    void leastActiveSteersAwayFromASlowProvider() throws Exception {
        steersAwayFromSlowProvider("polylb-leastactive");
    }

    @Test
    void peakEwmaSteersAwayFromASlowProvider() throws Exception {
        try (Balancer probe = new Balancer("loadbalance=peakewma")) {
            probe.strategy();
        } catch (PolylbException e) {
            Assumptions.assumeTrue(e.status() != Status.INVALID_CONFIG,
                    "polylb has no 'peakewma' strategy yet: " + e.getMessage());
            throw e;
        }
        steersAwayFromSlowProvider("polylb-peakewma");
    }

    private void steersAwayFromSlowProvider(String loadbalance) throws Exception {
        try (Consumer consumer = consumer(loadbalance, 2000, 0)) {
            // Warm up (connections, JIT, serialization) with three equal providers first.
            runConcurrently(consumer, loadbalance + "-warmup-", 6, 40);
            // C answers 300 ms later than A and B: far slower even when a busy CI machine slows
            // everything down.
            EXTRA_DELAY_MS.put("C", 300);
            Map<String, AtomicInteger> served = runConcurrently(consumer, loadbalance + "-", 6, 60);
            int a = count(served, "A");
            int b = count(served, "B");
            int c = count(served, "C");
            String counts = loadbalance + " A=" + a + " B=" + b + " C=" + c;
            System.out.println("calls served: " + counts);
            assertEquals(360, a + b + c, counts);
            // Unsteered (random, round robin) C would get a third: 120 calls.
            assertTrue(c * 3 < Math.min(a, b) && c < 60,
                    "the slow provider was not avoided: " + counts + "; " + consumer.stats(loadbalance));
            awaitNoneInFlight(consumer, loadbalance);
        } finally {
            EXTRA_DELAY_MS.remove("C");
        }
    }

    /** {@code threads} callers making {@code callsEach} calls; returns calls served per provider. */
    private static Map<String, AtomicInteger> runConcurrently(Consumer consumer, String prefix, int threads,
            int callsEach) throws Exception {
        Map<String, AtomicInteger> served = new ConcurrentHashMap<>();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            List<Future<?>> futures = new ArrayList<>();
            AtomicInteger seq = new AtomicInteger();
            for (int t = 0; t < threads; t++) {
                futures.add(pool.submit(() -> {
                    for (int i = 0; i < callsEach; i++) {
                        String name = consumer.echo.work(prefix + seq.incrementAndGet(), 1);
                        served.computeIfAbsent(name, k -> new AtomicInteger()).incrementAndGet();
                    }
                    return null;
                }));
            }
            for (Future<?> f : futures) {
                f.get(90, TimeUnit.SECONDS);
            }
        } finally {
            pool.shutdown();
        }
        return served;
    }

    private static int count(Map<String, AtomicInteger> served, String name) {
        AtomicInteger n = served.get(name);
        return n == null ? 0 : n.get();
    }

    /** Every pick was reported (or released): polylb's in-flight counters are back to 0. */
    private static void awaitNoneInFlight(Consumer consumer, String loadbalance) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        String last = "";
        while (System.nanoTime() < deadline) {
            int active = 0;
            for (String json : consumer.stats(loadbalance)) {
                last = json;
                for (JsonElement m : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                    active += m.getAsJsonObject().get("active").getAsInt();
                }
            }
            if (active == 0 && !last.isEmpty()) {
                return;
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
        throw new AssertionError("calls still counted in flight: " + last);
    }
}
