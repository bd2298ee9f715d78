package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.invoker;
import static io.polylb.dubbo.TestInvokers.invokers;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.polylb.Balancer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.RoundRobinLoadBalance;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Method-level weights ({@code <method>.weight} on provider URLs, read by Dubbo's
 * AbstractLoadBalance.getWeight before {@code weight}) against the real dubbo-cluster classes.
 */
class DubboMethodWeightTest extends AdapterTest {
    private static int nativeBalancers(PolylbLoadBalance lb) {
        return lb.statsJson(TestInvokers.SERVICE).size();
    }

    @Test
    void roundRobinFollowsMethodWeightsForThatMethodOnlyLikeDubbo() {
        List<Invoker<Object>> list = invokers(
                "weight=3&sayHello.weight=7",
                "weight=5&sayHello.weight=1",
                "weight=7",
                "weight=11&sayHello.weight=0",
                "weight=2&sayHello.weight=-4&bye.weight=9");
        RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        String[] methods = {"sayHello", "other", "sayHello", "bye", "another"};
        for (int i = 0; i < 3000; i++) {
            String method = methods[i % methods.length];
            RpcInvocation inv = call(method, "x");
            assertSame(dubbo.select(list, list.get(0).getUrl(), inv), pick(polylb, list, inv),
                    method + ", pick #" + i);
        }
        // The service's balancer (other, another) plus one per method with its own weights.
        assertEquals(3, nativeBalancers(polylb));
    }

    @Test
    void methodsWithoutMethodWeightsShareOneBalancer() {
        List<Invoker<Object>> list = invokers("weight=3&timestamp=1", "weight=5", "weight=7&sayHello.weight=7");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.LeastActive());
        for (String method : new String[] {"sayHello", "other", "bye"}) {
            pick(polylb, list, call(method));
        }
        // sayHello.weight equals weight on the only provider declaring it: nothing to split.
        assertEquals(1, nativeBalancers(polylb));
    }

    @Test
    void consistentHashNeverSplitsForMethodWeights() {
        List<Invoker<Object>> list = invokers("sayHello.weight=1", "weight=5&sayHello.weight=500", "weight=7");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        org.apache.dubbo.rpc.cluster.loadbalance.ConsistentHashLoadBalance dubbo =
                new org.apache.dubbo.rpc.cluster.loadbalance.ConsistentHashLoadBalance();
        for (int k = 0; k < 500; k++) {
            RpcInvocation inv = call(k % 2 == 0 ? "sayHello" : "other", "key-" + k);
            assertSame(dubbo.select(list, list.get(0).getUrl(), inv), pick(polylb, list, inv));
        }
        assertEquals(1, nativeBalancers(polylb), "Dubbo's ring ignores weights");
    }

    /**
     * Random with a fixed seed: each provider's share of picks for sayHello is within 5 binomial
     * standard deviations of its sayHello weight's share, and another method follows the
     * service-level weights.
     */
    @Test
    void randomDistributionFollowsMethodWeights() {
        List<Invoker<Object>> list = seeded(42, invokers(
                "weight=100&sayHello.weight=10",
                "weight=300&sayHello.weight=60",
                "weight=600",
                "weight=200&sayHello.weight=0"));
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Random());
        int n = 40_000;
        assertShares(polylb, list, "sayHello", n, new int[] {10, 60, 600, 0});
        assertShares(polylb, list, "other", n, new int[] {100, 300, 600, 200});
        assertEquals(2, nativeBalancers(polylb));
    }

    /**
     * Dubbo's quirk per method: the first provider declares neither weight nor timestamp, so
     * Dubbo's random ignores every weight for other methods, but sayHello.weight there makes
     * sayHello weighted (falling back to each provider's weight where it has no sayHello.weight).
     */
    @Test
    void randomQuirkIsDecidedPerMethodLikeDubbo() {
        List<Invoker<Object>> list = seeded(7, invokers(
                "sayHello.weight=300",
                "weight=50&sayHello.weight=100",
                "weight=1000"));
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Random());
        int n = 30_000;
        assertShares(polylb, list, "sayHello", n, new int[] {300, 100, 1000});
        assertShares(polylb, list, "other", n, new int[] {1, 1, 1});
    }

    /** The same providers, the first one asking polylb for a fixed seed (reproducible picks). */
    private static List<Invoker<Object>> seeded(long seed, List<Invoker<Object>> list) {
        List<Invoker<Object>> out = new ArrayList<>(list);
        out.set(0, new TestInvokers.FakeInvoker(
                list.get(0).getUrl().addParameter(PolylbLoadBalance.EXTRA_CONFIG_KEY, "seed=" + seed)));
        return out;
    }

    private static void assertShares(LoadBalance lb, List<Invoker<Object>> list, String method, int n,
            int[] weights) {
        int[] counts = new int[list.size()];
        for (int i = 0; i < n; i++) {
            counts[list.indexOf(pick(lb, list, call(method)))]++;
        }
        double total = Arrays.stream(weights).sum();
        for (int i = 0; i < counts.length; i++) {
            double p = weights[i] / total;
            double mean = n * p;
            double sd = Math.sqrt(n * p * (1 - p));
            assertTrue(Math.abs(counts[i] - mean) <= 5 * sd,
                    method + ": counts " + Arrays.toString(counts) + ", weights " + Arrays.toString(weights));
        }
    }

    /**
     * Warm-up with a method weight: polylb's effective weight for the method's invokers equals
     * Dubbo's getWeight for a call of that method, and for another method the service-level one.
     */
    @Test
    void warmUpWithMethodWeightsEqualsDubbosGetWeight() {
        DubboParityTest.DubboWeight dubbo = new DubboParityTest.DubboWeight();
        Integer[] methodWeights = {null, -5, 0, 1, 7, 50, 1000};
        Integer[] weights = {null, -1, 0, 100, 250};
        Long[] uptimes = {null, -5000L, 0L, 13L, 60000L, 305999L, 599999L, 600001L};
        String[] warmups = {null, "0", "1000", "120000", "900000"};
        int compared = 0;
        for (Integer mw : methodWeights) {
            for (Integer w : weights) {
                for (Long uptime : uptimes) {
                    for (String warmup : warmups) {
                        compared += compareWeights(dubbo, mw, w, uptime, warmup);
                    }
                }
            }
        }
        assertEquals(methodWeights.length * weights.length * uptimes.length * warmups.length, compared);
    }

    /** One case, both methods; retried until Dubbo's clock reads fall in one millisecond. */
    private static int compareWeights(DubboParityTest.DubboWeight dubbo, Integer mw, Integer w, Long uptime,
            String warmup) {
        RpcInvocation sayHello = call("sayHello");
        RpcInvocation other = call("other");
        for (int attempt = 0; attempt < 100; attempt++) {
            long now = System.currentTimeMillis();
            Invoker<Object> provider = invoker(1, TestInvokers.weightParams(w, mw, uptime, warmup, now));
            int expectedSayHello = dubbo.weight(provider, sayHello);
            int expectedOther = dubbo.weight(provider, other);
            if (System.currentTimeMillis() != now) {
                continue; // Dubbo may have read another millisecond
            }
            String what = "sayHello.weight=" + mw + " weight=" + w + " uptime=" + uptime + " warmup=" + warmup;
            assertEquals(expectedSayHello, effectiveWeight(DubboUrls.providerParams(provider, "sayHello"), now),
                    "sayHello: " + what);
            assertEquals(expectedOther, effectiveWeight(DubboUrls.providerParams(provider, "other"), now),
                    "other: " + what);
            assertEquals(expectedOther, effectiveWeight(DubboUrls.providerParams(provider), now),
                    "service level: " + what);
            return 1;
        }
        throw new AssertionError("the clock kept moving");
    }

    private static int effectiveWeight(DubboUrls.ProviderParams p, long nowMs) {
        try (Balancer lb = new Balancer("loadbalance=random")) {
            lb.update(List.of(new io.polylb.Invoker(1, "10.0.0.1:20880", p.weight(), p.startTimeMs(),
                    p.warmupMs(), null)));
            JsonObject member = JsonParser.parseString(lb.statsJson(nowMs * 1000)).getAsJsonObject()
                    .getAsJsonArray("invokers").get(0).getAsJsonObject();
            return member.get("effective_weight").getAsInt();
        }
    }

    /**
     * Provider churn: a method override that appears (on a provider other than the first, whose
     * URL object stays), disappears and reappears (on a new first provider) is picked up, and
     * round robin goes on exactly as Dubbo's per-method state does.
     */
    @Test
    void overridesAppearingAndDisappearingWithProviderChurnArePickedUp() {
        RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        Invoker<Object> first = invoker(1, "weight=3");
        // Phase 1: no overrides. sayHello's picks are a whole number of periods (3 + 5 = 8), so
        // Dubbo's counters for it are back to zero, as a new balancer's are.
        List<Invoker<Object>> phase1 = List.of(first, invoker(2, "weight=5"));
        compare(dubbo, polylb, phase1, 40, 2);
        assertEquals(1, nativeBalancers(polylb));

        // Phase 2: provider 2 comes back with sayHello.weight and provider 3 joins with one; the
        // first provider (whose URL the binding is keyed on) is the same object.
        phase1.get(1).destroy();
        List<Invoker<Object>> phase2 = List.of(first, invoker(2, "weight=5&sayHello.weight=9"),
                invoker(3, "weight=4&sayHello.weight=2"));
        compare(dubbo, polylb, phase2, 300, 3);
        assertEquals(2, nativeBalancers(polylb));

        // Phase 3: the overrides disappear again; sayHello keeps its balancer, now with the
        // service-level weights, and goes on exactly as Dubbo (counters of changed weights reset).
        phase2.get(1).destroy();
        phase2.get(2).destroy();
        List<Invoker<Object>> phase3 = List.of(first, invoker(2, "weight=5"), invoker(3, "weight=4"));
        compare(dubbo, polylb, phase3, 300, 3);

        // Phase 4: a new first provider object declaring an override (the binding is re-resolved
        // from its URL); the others unchanged.
        first.destroy();
        List<Invoker<Object>> phase4 = List.of(invoker(1, "weight=3&sayHello.weight=6"), phase3.get(1),
                phase3.get(2));
        compare(dubbo, polylb, phase4, 300, 3);
        assertEquals(2, nativeBalancers(polylb));
    }

    /**
     * Threads calling several methods while the provider list churns (overrides appearing and
     * disappearing, providers replaced): every pick is from the list the call passed, and every
     * balancer's in-flight counts are back to 0 at the end.
     *
     * <p>A select that keeps losing races with set changes finishes under the service's lock,
     * so no call may give up ("kept changing"); give-ups are counted to say so if one does.
     *
     * <p>Each round publishes a list of new objects, then destroys the previous ones (as Dubbo's
     * registry directory does), while calls may still hold any earlier list. The set takes each
     * list's objects once and matches all older ones as aliases, so it is rebuilt exactly once per
     * round, never back to older objects, provided a list is seen before the next one is published:
     * each round therefore waits until its list is registered before the next begins. Without that
     * wait a round's list can go unseen (threads just starting, or all preempted for the round's
     * 5 ms); a call still holding it, live in the instant between the next list's publication and
     * its destruction, then meets a set of newer objects it cannot tell from older ones ("newer"
     * is "seen later", ServiceState.cover): the set goes back to them and, once they are destroyed,
     * forth to the live ones, one rebuild more (InvokerGenerationsTest
     * .olderObjectsSeenLateConvergeToTheLiveOnes). That race once made this test see generation 62.
     */
    @Test
    void concurrentCallsDuringChurnStayConsistent() throws Exception {
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.LeastActive());
        String[][] variants = {
            {"weight=3", "weight=5", "weight=7"},
            {"weight=3&sayHello.weight=9", "weight=5", "weight=7&sayHello.weight=1"},
            {"weight=3", "weight=5&bye.weight=2", "weight=7&sayHello.weight=0"},
        };
        java.util.concurrent.atomic.AtomicReference<List<Invoker<Object>>> current =
                new java.util.concurrent.atomic.AtomicReference<>(invokers(variants[0]));
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        java.util.concurrent.ConcurrentLinkedQueue<Throwable> errors = new java.util.concurrent.ConcurrentLinkedQueue<>();
        java.util.concurrent.atomic.AtomicLong calls = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.atomic.AtomicLong gaveUp = new java.util.concurrent.atomic.AtomicLong();
        String[] methods = {"sayHello", "bye", "other"};
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < 3; t++) {
            int seed = t;
            threads.add(new Thread(() -> {
                try {
                    for (int i = 0; !stop.get(); i++) {
                        List<Invoker<Object>> list = current.get();
                        RpcInvocation inv = call(methods[(i + seed) % methods.length]);
                        calls.incrementAndGet();
                        Invoker<Object> chosen;
                        try {
                            PolylbClusterFilter.beginInvocation(inv);
                            chosen = polylb.select(list, list.get(0).getUrl(), inv);
                        } catch (org.apache.dubbo.rpc.RpcException e) {
                            if (e.getMessage() == null || !e.getMessage().contains("kept changing")) {
                                throw e;
                            }
                            gaveUp.incrementAndGet();
                            continue;
                        } finally {
                            PolylbClusterFilter.releaseUnsent(inv);
                        }
                        if (list.stream().noneMatch(member -> member == chosen)) {
                            throw new AssertionError(chosen + " not in " + list);
                        }
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            }));
        }
        threads.forEach(Thread::start);
        try {
            awaitRegistered(polylb, current.get(), errors);
            for (int round = 1; round <= 60; round++) {
                List<Invoker<Object>> old = current.get();
                List<Invoker<Object>> next = invokers(variants[round % variants.length]);
                current.set(next);
                old.forEach(Invoker::destroy);
                Thread.sleep(5);
                awaitRegistered(polylb, next, errors);
            }
        } finally {
            stop.set(true);
            for (Thread thread : threads) {
                thread.join(30_000);
            }
        }
        assertTrue(errors.isEmpty(), () -> errors.peek().toString());
        // Calls holding earlier generations' objects (live or destroyed) match them by provider
        // identity: the set is rebuilt once per generation (the first list's, then 60), never back
        // and forth.
        assertEquals(0, gaveUp.get(), gaveUp + " give-ups in " + calls + " calls");
        assertEquals(61, polylb.serviceState(TestInvokers.SERVICE).set.generation, "set generation");
        for (String json : polylb.statsJson(TestInvokers.SERVICE)) {
            for (com.google.gson.JsonElement member
                    : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                assertEquals(0, member.getAsJsonObject().get("active").getAsInt(), json);
            }
        }
        assertEquals(3, nativeBalancers(polylb), "the service's, sayHello's and bye's");
    }

    /**
     * Waits until the service's set has {@code list}'s objects as members (a select with it was
     * made), failing after 30 s or as soon as a calling thread failed.
     */
    private static void awaitRegistered(PolylbLoadBalance polylb, List<Invoker<Object>> list,
            java.util.Queue<Throwable> errors) throws InterruptedException {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            ServiceState state = polylb.serviceState(TestInvokers.SERVICE);
            InvokerSet set = state == null ? null : state.set;
            if (set != null && list.stream().allMatch(set::isMember)) {
                return;
            }
            assertTrue(errors.isEmpty(), () -> errors.peek().toString());
            assertTrue(System.nanoTime() < deadline, "the list was not registered within 30 s");
            Thread.sleep(0, 100_000);
        }
    }

    /** {@code picks} calls alternating sayHello and other (every {@code every}-th is other). */
    private static void compare(RoundRobinLoadBalance dubbo, PolylbLoadBalance polylb, List<Invoker<Object>> list,
            int picks, int every) {
        for (int i = 0; i < picks * every / (every - 1); i++) {
            String method = i % every == every - 1 ? "other" : "sayHello";
            RpcInvocation inv = call(method);
            assertSame(dubbo.select(list, list.get(0).getUrl(), inv), pick(polylb, list, inv),
                    method + " with " + list + ", call #" + i);
        }
    }
}
