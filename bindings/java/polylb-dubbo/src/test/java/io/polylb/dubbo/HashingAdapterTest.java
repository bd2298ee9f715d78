package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.genericCall;
import static io.polylb.dubbo.TestInvokers.invokers;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import java.util.function.ObjIntConsumer;
import org.apache.dubbo.rpc.Invoker;

/**
 * Checks the adapters of the key-hashing strategies (maglev, rendezvous) share: the call's key is
 * Dubbo's consistent-hash key, a routed subset is passed as candidates, and keys follow weights.
 */
abstract class HashingAdapterTest extends AdapterTest {
    /** n providers at 10.0.0.1..n:20880, each URL with {@code params}. */
    static List<Invoker<Object>> providers(int n, String params) {
        String[] p = new String[n];
        java.util.Arrays.fill(p, params);
        return invokers(p);
    }

    static String address(Invoker<Object> invoker) {
        return invoker.getUrl().getAddress();
    }

    /**
     * The generic name with {@code polylb.strategy=strategy} picks as the named adapter {@code named}
     * over 8 providers of weight 100 (300 keys), and its stats name the strategy.
     */
    void assertGenericNamePicksAsTheNamedAdapter(PolylbLoadBalance named, String strategy) {
        List<Invoker<Object>> namedList = providers(8, "weight=100");
        List<Invoker<Object>> generic = providers(8, "weight=100&polylb.strategy=" + strategy);
        PolylbLoadBalance polylb = track(new PolylbLoadBalance());
        for (int k = 0; k < 300; k++) {
            assertEquals(address(pick(named, namedList, call("get", "k" + k))),
                    address(pick(polylb, generic, call("get", "k" + k))), "k" + k);
        }
        String stats = polylb.statsJson(TestInvokers.SERVICE).get(0);
        assertTrue(stats.contains("\"strategy\":\"" + strategy + "\""), stats);
    }

    /**
     * Over 10 providers with {@code params} (hash.arguments=1): only the second argument is the
     * key, a generic $invoke hashes its inner arguments as Dubbo's ring does, and 300 keys reach
     * more than 5 providers. {@code alsoPerKey}, unless null, runs further checks over the list for each k.
     */
    void assertKeysFollowHashArgumentsAndGenericCalls(
            PolylbLoadBalance polylb, String params, ObjIntConsumer<List<Invoker<Object>>> alsoPerKey) {
        List<Invoker<Object>> list = providers(10, params);
        Set<Invoker<Object>> seen = new HashSet<>();
        for (int k = 0; k < 300; k++) {
            // The first argument changes, the second (the key) does not: one provider.
            Invoker<Object> byKey = pick(polylb, list, call("findUser", "first-" + k, "key"));
            assertSame(pick(polylb, list, call("findUser", "first-0", "key")), byKey);
            // A generic $invoke hashes its inner arguments, as Dubbo's ring does.
            Invoker<Object> direct = pick(polylb, list, call("findUser", "a", "key-" + k));
            assertSame(direct, pick(polylb, list, genericCall("findUser", "a", "key-" + k)), "key-" + k);
            if (alsoPerKey != null) {
                alsoPerKey.accept(list, k);
            }
            seen.add(direct);
        }
        assertTrue(seen.size() > 5, "300 second arguments over 10 providers: " + seen);
    }

    /** A check of where a key went with a provider routed away. */
    interface RoutedKeyCheck {
        /** {@code now} is where {@code key} went; {@code moved} says its provider was routed away. */
        void check(String key, Invoker<Object> now, boolean moved);
    }

    /**
     * Routes 600 keys with {@code polylb} over {@code all}, then, for each provider routed out of
     * the list, asserts that exactly the keys it held move (off it) and each other key stays, that
     * some key moved, and {@code perSubset}'s check (made for that list) of every key; finally that
     * the routed lists were candidates, not updates: one registration of the set.
     */
    void assertOnlyTheRoutedAwayProvidersKeysMove(PolylbLoadBalance polylb, List<Invoker<Object>> all,
            Function<List<Invoker<Object>>, RoutedKeyCheck> perSubset) {
        Map<String, Invoker<Object>> owner = new HashMap<>();
        for (int k = 0; k < 600; k++) {
            owner.put("user-" + k, pick(polylb, all, call("get", "user-" + k)));
        }
        for (Invoker<Object> away : all) {
            List<Invoker<Object>> subset = new ArrayList<>(all);
            subset.remove(away);
            RoutedKeyCheck check = perSubset.apply(subset);
            int moved = 0;
            for (Map.Entry<String, Invoker<Object>> e : owner.entrySet()) {
                Invoker<Object> now = pick(polylb, subset, call("get", e.getKey()));
                boolean wasAway = e.getValue() == away;
                if (wasAway) {
                    assertNotSame(away, now);
                    moved++;
                } else {
                    assertSame(e.getValue(), now, e.getKey() + " moved though its provider was routed");
                }
                check.check(e.getKey(), now, wasAway);
            }
            assertTrue(moved > 0, "no key on " + away);
        }
        assertEquals(1, polylb.serviceState(TestInvokers.SERVICE).nativeUpdates());
    }

    /**
     * 4000 keys with {@code polylb} over {@code list}, whose first three providers weigh 100, 100
     * and 200: they take 1000, 1000 and 2000 keys within 5 binomial standard deviations (27, 27,
     * 32). Returns the keys per provider.
     */
    Map<Invoker<Object>, Integer> assertKeysFollowWeights100100200(
            PolylbLoadBalance polylb, List<Invoker<Object>> list) {
        Map<Invoker<Object>, Integer> counts = new HashMap<>();
        for (int k = 0; k < 4000; k++) {
            counts.merge(pick(polylb, list, call("get", "user-" + k)), 1, Integer::sum);
        }
        assertTrue(Math.abs(counts.get(list.get(0)) - 1000) < 140, counts.toString());
        assertTrue(Math.abs(counts.get(list.get(1)) - 1000) < 140, counts.toString());
        assertTrue(Math.abs(counts.get(list.get(2)) - 2000) < 160, counts.toString());
        return counts;
    }
}
