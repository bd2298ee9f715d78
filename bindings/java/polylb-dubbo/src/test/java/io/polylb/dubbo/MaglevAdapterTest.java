package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.genericCall;
import static io.polylb.dubbo.TestInvokers.invokers;
import static io.polylb.dubbo.TestInvokers.weighted;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.PolylbException;
import io.polylb.Status;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.RpcInvocation;
import org.junit.jupiter.api.Test;

/**
 * {@code polylb-maglev} (and {@code polylb} with {@code polylb.strategy=maglev}): the call's key
 * is Dubbo's consistent-hash key ({@code hash.arguments}, default the first argument), placed by
 * the core's weighted Maglev table.
 */
class MaglevAdapterTest extends AdapterTest {
    private static List<Invoker<Object>> providers(int n, String params) {
        String[] p = new String[n];
        java.util.Arrays.fill(p, params);
        return invokers(p);
    }

    @Test
    void theSameFirstArgumentGoesToTheSameProvider() {
        List<Invoker<Object>> list = providers(10, "weight=100");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        Map<Invoker<Object>, Integer> keysPerProvider = new HashMap<>();
        for (int k = 0; k < 500; k++) {
            Invoker<Object> first = pick(polylb, list, call("sayHello", "user-" + k));
            assertSame(first, pick(polylb, list, call("sayHello", "user-" + k)), "user-" + k);
            // Only the first argument is the key (hash.arguments defaults to 0).
            assertSame(first, pick(polylb, list, call("sayHello", "user-" + k, "other-" + k)), "user-" + k);
            keysPerProvider.merge(first, 1, Integer::sum);
        }
        assertEquals(10, keysPerProvider.size(), "500 keys over 10 providers: " + keysPerProvider);
        String stats = polylb.statsJson(TestInvokers.SERVICE).get(0);
        assertTrue(stats.contains("\"strategy\":\"maglev\""), stats);
        assertTrue(stats.contains("\"active\":0"), stats);
        // Not the ring: Dubbo's hash.nodes (here below the ring's minimum of 4) is not maglev's.
        List<Invoker<Object>> withHashNodes = providers(10, "weight=100&hash.nodes=2");
        PolylbLoadBalance other = track(new PolylbLoadBalance.Maglev());
        for (int k = 0; k < 100; k++) {
            assertEquals(pick(polylb, list, call("sayHello", "user-" + k)).getUrl().getAddress(),
                    pick(other, withHashNodes, call("sayHello", "user-" + k)).getUrl().getAddress());
        }
    }

    /** The generic name with the strategy as a parameter builds the same table: the same picks. */
    @Test
    void polylbWithStrategyMaglevPicksAsPolylbMaglev() {
        List<Invoker<Object>> named = providers(8, "weight=100");
        List<Invoker<Object>> generic = providers(8, "weight=100&polylb.strategy=maglev");
        PolylbLoadBalance maglev = track(new PolylbLoadBalance.Maglev());
        PolylbLoadBalance polylb = track(new PolylbLoadBalance());
        for (int k = 0; k < 300; k++) {
            assertEquals(pick(maglev, named, call("get", "k" + k)).getUrl().getAddress(),
                    pick(polylb, generic, call("get", "k" + k)).getUrl().getAddress(), "k" + k);
        }
        String stats = polylb.statsJson(TestInvokers.SERVICE).get(0);
        assertTrue(stats.contains("\"strategy\":\"maglev\""), stats);
    }

    @Test
    void keysFollowHashArgumentsAndGenericCalls() {
        List<Invoker<Object>> list = providers(10, "hash.arguments=1");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        Set<Invoker<Object>> seen = new HashSet<>();
        for (int k = 0; k < 300; k++) {
            // The first argument changes, the second (the key) does not: one provider.
            Invoker<Object> byKey = pick(polylb, list, call("findUser", "first-" + k, "key"));
            assertSame(pick(polylb, list, call("findUser", "first-0", "key")), byKey);
            // A generic $invoke hashes its inner arguments, as Dubbo's ring does.
            Invoker<Object> direct = pick(polylb, list, call("findUser", "a", "key-" + k));
            assertSame(direct, pick(polylb, list, genericCall("findUser", "a", "key-" + k)), "key-" + k);
            seen.add(direct);
        }
        assertTrue(seen.size() > 5, "300 second arguments over 10 providers: " + seen);
    }

    /** A routed subset is passed as candidates: keys whose provider is routed away move, others stay. */
    @Test
    void aRoutedAwayProvidersKeysMoveAndOthersStay() {
        List<Invoker<Object>> all = providers(6, "weight=100");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        Map<String, Invoker<Object>> owner = new HashMap<>();
        for (int k = 0; k < 600; k++) {
            owner.put("user-" + k, pick(polylb, all, call("get", "user-" + k)));
        }
        for (Invoker<Object> away : all) {
            List<Invoker<Object>> subset = new ArrayList<>(all);
            subset.remove(away);
            int moved = 0;
            for (Map.Entry<String, Invoker<Object>> e : owner.entrySet()) {
                Invoker<Object> now = pick(polylb, subset, call("get", e.getKey()));
                if (e.getValue() == away) {
                    assertNotSame(away, now);
                    assertSame(now, pick(polylb, subset, call("get", e.getKey())), e.getKey());
                    moved++;
                } else {
                    assertSame(e.getValue(), now, e.getKey() + " moved though its provider was routed");
                }
            }
            assertTrue(moved > 0, "no key on " + away);
        }
        // The routed subsets were candidates, not updates: one registration of the set.
        assertEquals(1, polylb.serviceState(TestInvokers.SERVICE).nativeUpdates());
    }

    /** Maglev honours weights (Dubbo's ring does not): keys are shared out as the weights say. */
    @Test
    void keysFollowProviderWeights() {
        List<Invoker<Object>> list = weighted(100, 100, 200);
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        Map<Invoker<Object>, Integer> counts = new HashMap<>();
        for (int k = 0; k < 4000; k++) {
            counts.merge(pick(polylb, list, call("get", "user-" + k)), 1, Integer::sum);
        }
        // Expected 1000, 1000, 2000; within 5 binomial standard deviations (27, 27, 32).
        assertTrue(Math.abs(counts.get(list.get(0)) - 1000) < 140, counts.toString());
        assertTrue(Math.abs(counts.get(list.get(1)) - 1000) < 140, counts.toString());
        assertTrue(Math.abs(counts.get(list.get(2)) - 2000) < 160, counts.toString());
    }

    @Test
    void tableSizeComesFromPolylbConfigAndIsChecked() {
        // A valid size: accepted, and it is the table (7 providers fill a table of 7 slots).
        List<Invoker<Object>> seven = providers(7, "polylb.config=maglev.tableSize=7");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        Set<Invoker<Object>> seen = new HashSet<>();
        for (int k = 0; k < 200; k++) {
            seen.add(pick(polylb, seven, call("get", "user-" + k)));
        }
        assertEquals(7, seen.size());

        // Not a prime: the library's message, as an RpcException at the first call.
        List<Invoker<Object>> notPrime = providers(3, "polylb.config=maglev.tableSize=1000");
        RpcException bad = assertThrows(RpcException.class,
                () -> pick(track(new PolylbLoadBalance.Maglev()), notPrime, call("get", "k")));
        assertEquals(Status.INVALID_CONFIG, ((PolylbException) bad.getCause()).status());
        assertTrue(bad.getMessage().contains("maglev.tableSize") && bad.getMessage().contains("not a prime"),
                bad.getMessage());

        // More providers than slots: the provider list is rejected (LIMIT_EXCEEDED).
        List<Invoker<Object>> eight = providers(8, "polylb.config=maglev.tableSize=7");
        RpcException tooMany = assertThrows(RpcException.class,
                () -> pick(track(new PolylbLoadBalance.Maglev()), eight, call("get", "k")));
        assertEquals(Status.LIMIT_EXCEEDED, ((PolylbException) tooMany.getCause()).status());
        assertTrue(tooMany.getMessage().contains("maglev.tableSize"), tooMany.getMessage());

        // slowstart.* does not apply to maglev.
        List<Invoker<Object>> slowStart = providers(3, "polylb.config=slowstart.windowMs=1000");
        RpcException noSlowStart = assertThrows(RpcException.class,
                () -> pick(track(new PolylbLoadBalance.Maglev()), slowStart, call("get", "k")));
        assertEquals(Status.INVALID_CONFIG, ((PolylbException) noSlowStart.getCause()).status());
    }

    @Test
    void rpcInvocationKeysAreDubbosStringForms() {
        // String.valueOf of each hashed argument: 42 and "42" are the same key, as in Dubbo.
        List<Invoker<Object>> list = providers(10, "weight=100");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        for (int k = 0; k < 100; k++) {
            RpcInvocation number = call("get", Integer.valueOf(k));
            assertSame(pick(polylb, list, call("get", String.valueOf(k))), pick(polylb, list, number));
        }
    }
}
