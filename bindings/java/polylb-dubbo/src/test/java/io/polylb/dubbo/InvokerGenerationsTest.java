package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.invokers;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.router.state.BitList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Two generations of Invoker objects for the same providers (same URL identity), as after a
 * registry refresh while calls still hold the previous list: the adapter must neither fail nor
 * swap its provider set back and forth, and each call must get an element of its own list.
 */
class InvokerGenerationsTest extends AdapterTest {
    private static boolean holds(List<Invoker<Object>> list, Invoker<Object> chosen) {
        for (Invoker<Object> invoker : list) {
            if (invoker == chosen) {
                return true;
            }
        }
        return false;
    }

    /** Selects, checks the pick is an object of {@code list}, ends the invocation unsent. */
    private static Invoker<Object> pick(PolylbLoadBalance lb, List<Invoker<Object>> list, String method) {
        RpcInvocation inv = call(method, "k" + ThreadLocalRandom.current().nextInt(1000));
        Invoker<Object> chosen;
        try {
            PolylbClusterFilter.beginInvocation(inv);
            chosen = lb.select(list, list.get(0).getUrl(), inv);
        } finally {
            PolylbClusterFilter.releaseUnsent(inv);
        }
        if (!holds(list, chosen)) {
            fail(chosen + " (" + System.identityHashCode(chosen) + ") is not an object of the call's list " + list);
        }
        return chosen;
    }

    private static long generation(PolylbLoadBalance lb) {
        return lb.serviceState(TestInvokers.SERVICE).set.generation;
    }

    private static long nativeUpdates(PolylbLoadBalance lb) {
        return lb.serviceState(TestInvokers.SERVICE).nativeUpdates();
    }

    private static void assertNothingInFlight(PolylbLoadBalance lb) {
        for (String json : lb.statsJson(TestInvokers.SERVICE)) {
            for (JsonElement member : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                assertEquals(0, member.getAsJsonObject().get("active").getAsInt(), json);
            }
        }
    }

    /** Registered weight per address, from each native balancer's stats (one map per balancer). */
    private static List<Map<String, Integer>> weights(PolylbLoadBalance lb) {
        List<Map<String, Integer>> out = new ArrayList<>();
        for (String json : lb.statsJson(TestInvokers.SERVICE)) {
            Map<String, Integer> byAddress = new HashMap<>();
            for (JsonElement e : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                JsonObject member = e.getAsJsonObject();
                byAddress.put(member.get("address").getAsString(), member.get("weight").getAsInt());
            }
            out.add(byAddress);
        }
        return out;
    }

    private static final String[] STRATEGIES = {
        "random", "roundrobin", "leastactive", "shortestresponse", "consistenthash",
    };

    private static PolylbLoadBalance balancer(String strategy) {
        switch (strategy) {
            case "random": return new PolylbLoadBalance.Random();
            case "roundrobin": return new PolylbLoadBalance.RoundRobin();
            case "leastactive": return new PolylbLoadBalance.LeastActive();
            case "shortestresponse": return new PolylbLoadBalance.ShortestResponse();
            case "consistenthash": return new PolylbLoadBalance.ConsistentHash();
            default: throw new IllegalArgumentException(strategy);
        }
    }

    @Test
    void interleavedGenerationsNeitherFailNorFlip() {
        for (String strategy : STRATEGIES) {
            PolylbLoadBalance lb = track(balancer(strategy));
            List<Invoker<Object>> older = invokers("weight=3", "weight=5", "weight=7");
            List<Invoker<Object>> newer = invokers("weight=3", "weight=5", "weight=7");
            for (int i = 0; i < 3; i++) {
                assertTrue(older.get(i) != newer.get(i));
                assertEquals(older.get(i).getUrl().toIdentityString(), newer.get(i).getUrl().toIdentityString());
            }
            // Routed subsets and a reordering of each generation as well.
            List<List<Invoker<Object>>> lists = List.of(
                    older, newer,
                    List.of(older.get(0), older.get(2)), List.of(newer.get(1), newer.get(2)),
                    List.of(older.get(2), older.get(1), older.get(0)), List.of(newer.get(1)));

            pick(lb, older, "sayHello");
            pick(lb, newer, "sayHello");
            long generation = generation(lb);
            long updates = nativeUpdates(lb);
            assertTrue(generation <= 2, strategy + ": generation " + generation);
            for (int i = 0; i < 3000; i++) {
                List<Invoker<Object>> list = lists.get(i % lists.size());
                if (i % 7 == 0) {
                    // Dubbo's per-call shape: a fresh BitList over the directory's list.
                    list = new BitList<>(i % 2 == 0 ? older : newer);
                }
                pick(lb, list, i % 3 == 0 ? "bye" : "sayHello");
            }
            assertEquals(generation, generation(lb), strategy + ": the provider set was rebuilt");
            assertEquals(updates, nativeUpdates(lb), strategy + ": the native balancer was updated again");

            // The registry destroys the old objects: calls still holding them keep working, get
            // their own objects, and nothing is rebuilt (the set already holds the live ones).
            older.forEach(Invoker::destroy);
            for (int i = 0; i < 3000; i++) {
                List<Invoker<Object>> list = lists.get(i % lists.size());
                pick(lb, i % 5 == 0 ? new BitList<>(list) : list, "sayHello");
            }
            assertEquals(generation, generation(lb), strategy + ": rebuilt after the old objects were destroyed");
            assertEquals(updates, nativeUpdates(lb), strategy);
            assertNothingInFlight(lb);
        }
    }

    /**
     * The other order: the set first sees the newer objects, then a call with the older ones.
     * Whichever is registered, each call gets its own object, and once the older objects are
     * destroyed the live ones (with their parameters) are registered: at most two rebuilds.
     */
    @Test
    void olderObjectsSeenLateConvergeToTheLiveOnes() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.RoundRobin());
        List<Invoker<Object>> older = invokers("weight=3", "weight=5", "weight=7");
        List<Invoker<Object>> newer = invokers("weight=3", "weight=50", "weight=7");
        pick(lb, newer, "sayHello");
        long start = generation(lb);
        for (int i = 0; i < 1000; i++) {
            pick(lb, i % 2 == 0 ? older : newer, "sayHello");
        }
        older.forEach(Invoker::destroy);
        for (int i = 0; i < 1000; i++) {
            pick(lb, i % 2 == 0 ? older : newer, "sayHello");
        }
        assertTrue(generation(lb) - start <= 2, "rebuilt " + (generation(lb) - start) + " times");
        for (Map<String, Integer> w : weights(lb)) {
            assertEquals(50, w.get("10.0.0.2:20880"), w.toString());
        }
        // Round robin follows the live weights exactly over whole cycles (3 + 50 + 7 = 60).
        int[] counts = new int[3];
        for (int i = 0; i < 600; i++) {
            Invoker<Object> chosen = pick(lb, i % 2 == 0 ? older : newer, "sayHello");
            counts[chosen.getUrl().getHost().charAt(chosen.getUrl().getHost().length() - 1) - '1']++;
        }
        assertEquals(List.of(30, 500, 70), List.of(counts[0], counts[1], counts[2]));
        assertNothingInFlight(lb);
    }

    /** A newer object with a changed weight replaces the older one, and the new weight applies. */
    @Test
    void newerObjectWithChangedWeightIsApplied() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.RoundRobin());
        List<Invoker<Object>> older = invokers("weight=3", "weight=5", "weight=7");
        List<Invoker<Object>> newer = invokers("weight=3", "weight=50", "weight=7");
        pick(lb, older, "sayHello");
        for (Map<String, Integer> w : weights(lb)) {
            assertEquals(5, w.get("10.0.0.2:20880"), w.toString());
        }
        long start = generation(lb);
        for (int i = 0; i < 1000; i++) {
            pick(lb, i % 2 == 0 ? older : newer, "sayHello");
        }
        assertEquals(start + 1, generation(lb), "one rebuild: the newer objects replace the older ones");
        for (Map<String, Integer> w : weights(lb)) {
            assertEquals(50, w.get("10.0.0.2:20880"), w.toString());
        }
        assertNothingInFlight(lb);
    }

    /**
     * The registry removes a provider (its object is destroyed) while calls still hold the list
     * with it, the others unchanged or replaced by new objects: the set drops it once, late calls
     * pick among their live providers, and nothing is rebuilt back and forth.
     */
    @Test
    void removedProviderHeldByLateCallsDoesNotFlip() {
        for (boolean replaced : new boolean[] {false, true}) {
            PolylbLoadBalance lb = track(new PolylbLoadBalance.LeastActive());
            List<Invoker<Object>> older = invokers("weight=3", "weight=5", "weight=7");
            pick(lb, older, "sayHello");
            List<Invoker<Object>> newer = replaced
                    ? invokers("weight=3", "weight=50")
                    : List.of(older.get(0), older.get(1));
            older.get(2).destroy();
            if (replaced) {
                older.forEach(Invoker::destroy);
            }
            pick(lb, newer, "sayHello");
            pick(lb, older, "sayHello");
            long generation = generation(lb);
            long updates = nativeUpdates(lb);
            for (int i = 0; i < 2000; i++) {
                List<Invoker<Object>> list = i % 3 == 0 ? newer : older;
                Invoker<Object> chosen = pick(lb, list, i % 2 == 0 ? "sayHello" : "bye");
                assertTrue(chosen != older.get(2),
                        "replaced=" + replaced + ", call #" + i + ": picked the removed provider");
                assertTrue(chosen.isAvailable() || list == older && replaced, chosen + " is destroyed");
            }
            assertEquals(generation, generation(lb), "replaced=" + replaced + ": the set was rebuilt");
            assertEquals(updates, nativeUpdates(lb), "replaced=" + replaced);
            assertEquals(2, lb.serviceState(TestInvokers.SERVICE).set.size());
            // A routed subset of the late list: the removed provider is never its pick.
            for (int i = 0; i < 20; i++) {
                assertSame(older.get(0), pick(lb, List.of(older.get(2), older.get(0)), "sayHello"));
            }
            assertEquals(generation, generation(lb));
            assertNothingInFlight(lb);
        }
    }

    /**
     * A caller that hands out new objects for the same providers on every call (never seen in
     * Dubbo's own directories): each is newer, so the set follows them, but the objects kept as
     * aliases stay bounded, and calls with any earlier list still get their own objects.
     */
    @Test
    void freshObjectsPerCallKeepAliasesBounded() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.RoundRobin());
        List<List<Invoker<Object>>> seen = new ArrayList<>();
        for (int i = 0; i < 500; i++) {
            List<Invoker<Object>> list = invokers("weight=3", "weight=5", "weight=7");
            seen.add(list);
            pick(lb, list, "sayHello");
            pick(lb, seen.get(ThreadLocalRandom.current().nextInt(seen.size())), "sayHello");
            InvokerSet set = lb.serviceState(TestInvokers.SERVICE).set;
            assertTrue(set.aliasCount() <= set.aliasLimit(), set.aliasCount() + " aliases");
            assertEquals(3, set.size());
        }
        assertNothingInFlight(lb);
    }

    /**
     * Several threads, calls holding the older and the newer generation at once (the newer with a
     * changed weight), generations replaced and destroyed while calls run: no give-up, each pick
     * from the call's own list, nothing left in flight, the newest weight registered.
     */
    @Test
    void concurrentGenerationsNeverGiveUp() throws Exception {
        for (String strategy : new String[] {"leastactive", "roundrobin", "random"}) {
            PolylbLoadBalance lb = track(balancer(strategy));
            String[][] generations = {
                {"weight=3", "weight=5", "weight=7"},
                {"weight=3", "weight=50", "weight=7"},
                {"weight=30", "weight=50", "weight=7&sayHello.weight=70"},
            };
            // Calls hold either of the two latest generations.
            AtomicReference<List<Invoker<Object>>> previous = new AtomicReference<>(invokers(generations[0]));
            AtomicReference<List<Invoker<Object>>> current = new AtomicReference<>(previous.get());
            pick(lb, current.get(), "sayHello");
            long start = generation(lb);
            AtomicBoolean stop = new AtomicBoolean();
            ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
            AtomicLong calls = new AtomicLong();
            String[] methods = {"sayHello", "bye"};
            List<Thread> threads = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                threads.add(new Thread(() -> {
                    ThreadLocalRandom random = ThreadLocalRandom.current();
                    try {
                        while (!stop.get()) {
                            List<Invoker<Object>> list = random.nextBoolean() ? previous.get() : current.get();
                            if (random.nextInt(4) == 0) {
                                list = List.of(list.get(random.nextInt(3)), list.get(2 - random.nextInt(2)));
                                list = list.get(0) == list.get(1) ? List.of(list.get(0)) : list;
                            }
                            pick(lb, list, methods[random.nextInt(methods.length)]);
                            calls.incrementAndGet();
                        }
                    } catch (Throwable e) {
                        errors.add(e);
                    }
                }));
            }
            threads.forEach(Thread::start);
            try {
                for (int g = 1; g < generations.length; g++) {
                    Thread.sleep(300);
                    List<Invoker<Object>> next = invokers(generations[g]);
                    previous.set(current.get());
                    current.set(next);
                    Thread.sleep(300);
                    // Dubbo destroys the replaced invokers a little later; calls may still hold them.
                    List<Invoker<Object>> old = previous.get();
                    previous.set(next);
                    Thread.sleep(50);
                    old.forEach(Invoker::destroy);
                    previous.set(old); // a late call with a list of destroyed objects
                    Thread.sleep(100);
                    previous.set(next);
                }
                Thread.sleep(200);
            } finally {
                stop.set(true);
                for (Thread thread : threads) {
                    thread.join(30_000);
                }
            }
            assertTrue(errors.isEmpty(), () -> strategy + ": " + errors.peek());
            assertTrue(calls.get() > 1000, strategy + ": only " + calls + " calls");
            // At most one rebuild per provider and new generation (a routed subset brings in
            // only some of a generation's objects), however many calls interleave.
            assertTrue(generation(lb) - start <= 3 * (generations.length - 1),
                    strategy + ": " + (generation(lb) - start) + " rebuilds in " + calls + " calls");
            assertNothingInFlight(lb);
            for (Map<String, Integer> w : weights(lb)) {
                assertEquals(30, w.get("10.0.0.1:20880"), strategy + ": " + w);
                assertEquals(50, w.get("10.0.0.2:20880"), strategy + ": " + w);
                int third = w.get("10.0.0.3:20880");
                assertTrue(third == 7 || third == 70, strategy + ": " + w);
            }
            // sayHello's own weights (sayHello.weight=70 on the third provider) are registered.
            assertTrue(weights(lb).stream().anyMatch(w -> w.get("10.0.0.3:20880") == 70),
                    strategy + ": " + weights(lb));
            Invoker<Object> one = pick(lb, current.get(), "sayHello");
            assertSame(one, current.get().get(one.getUrl().getHost().charAt(7) - '1'));
        }
    }
}
