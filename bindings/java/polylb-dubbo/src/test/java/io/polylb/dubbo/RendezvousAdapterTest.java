package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.genericCall;
import static io.polylb.dubbo.TestInvokers.invokers;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
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
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.Test;

/**
 * {@code polylb-rendezvous} (and {@code polylb} with {@code polylb.strategy=rendezvous}): the
 * call's key is Dubbo's consistent-hash key ({@code hash.arguments}, default the first argument),
 * placed by the core's weighted rendezvous scores.
 */
class RendezvousAdapterTest extends AdapterTest {
    /**
     * The cross-language contract: providers 1..8 at 10.0.0.&lt;id&gt;:20880, weight 100 each, key
     * "user-&lt;i&gt;" goes to this id. Computed once from the Rust library; the core's
     * {@code RendezvousTest}, the Go and the Python tests assert the same, and all must agree.
     */
    private static final int[] CROSS_LANGUAGE_PICKS = {2, 6, 7, 2, 1, 6, 8, 3, 8, 3};

    private static List<Invoker<Object>> providers(int n, String params) {
        String[] p = new String[n];
        java.util.Arrays.fill(p, params);
        return invokers(p);
    }

    private static String address(Invoker<Object> invoker) {
        return invoker.getUrl().getAddress();
    }

    /** Loaded by name through Dubbo's SPI, it picks the contract's providers by first argument. */
    @Test
    void polylbRendezvousLoadsThroughDubbosSpiAndPicksTheContractsProviders() {
        FrameworkModel framework = new FrameworkModel();
        try {
            LoadBalance lb = framework.newApplication().getExtensionLoader(LoadBalance.class)
                    .getExtension("polylb-rendezvous");
            assertInstanceOf(PolylbLoadBalance.Rendezvous.class, lb);
            List<Invoker<Object>> list = providers(8, "weight=100");
            for (int k = 0; k < CROSS_LANGUAGE_PICKS.length; k++) {
                String want = "10.0.0." + CROSS_LANGUAGE_PICKS[k] + ":20880";
                assertEquals(want, address(pick(lb, list, call("sayHello", "user-" + k))), "user-" + k);
                // Only the first argument is the key (hash.arguments defaults to 0).
                assertEquals(want, address(pick(lb, list, call("sayHello", "user-" + k, "other"))), "user-" + k);
            }
            String stats = ((PolylbLoadBalance) lb).statsJson(TestInvokers.SERVICE).get(0);
            assertTrue(stats.contains("\"strategy\":\"rendezvous\""), stats);
            assertTrue(stats.contains("\"active\":0"), stats);
        } finally {
            framework.destroy();
        }
    }

    /** The generic name with the strategy as a parameter scores alike: the same picks. */
    @Test
    void polylbWithStrategyRendezvousPicksAsPolylbRendezvous() {
        List<Invoker<Object>> named = providers(8, "weight=100");
        List<Invoker<Object>> generic = providers(8, "weight=100&polylb.strategy=rendezvous");
        PolylbLoadBalance rendezvous = track(new PolylbLoadBalance.Rendezvous());
        PolylbLoadBalance polylb = track(new PolylbLoadBalance());
        for (int k = 0; k < 300; k++) {
            assertEquals(address(pick(rendezvous, named, call("get", "k" + k))),
                    address(pick(polylb, generic, call("get", "k" + k))), "k" + k);
        }
        String stats = polylb.statsJson(TestInvokers.SERVICE).get(0);
        assertTrue(stats.contains("\"strategy\":\"rendezvous\""), stats);
    }

    @Test
    void keysFollowHashArgumentsAndGenericCalls() {
        List<Invoker<Object>> list = providers(10, "hash.arguments=1&hash.nodes=2");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Rendezvous());
        Set<Invoker<Object>> seen = new HashSet<>();
        for (int k = 0; k < 300; k++) {
            // The first argument changes, the second (the key) does not: one provider. (hash.nodes,
            // below the ring's minimum of 4, is the ring's key and not passed to rendezvous.)
            Invoker<Object> byKey = pick(polylb, list, call("findUser", "first-" + k, "key"));
            assertSame(pick(polylb, list, call("findUser", "first-0", "key")), byKey);
            // A generic $invoke hashes its inner arguments, as Dubbo's ring does.
            Invoker<Object> direct = pick(polylb, list, call("findUser", "a", "key-" + k));
            assertSame(direct, pick(polylb, list, genericCall("findUser", "a", "key-" + k)), "key-" + k);
            // String.valueOf of each hashed argument: 42 and "42" are the same key, as in Dubbo.
            assertSame(pick(polylb, list, call("findUser", "a", String.valueOf(k))),
                    pick(polylb, list, call("findUser", "a", Integer.valueOf(k))));
            seen.add(direct);
        }
        assertTrue(seen.size() > 5, "300 second arguments over 10 providers: " + seen);
    }

    /**
     * A provider routed out of the call's list (Dubbo's reselect after a failed attempt passes the
     * list without it too) is not a candidate: only its keys move, each to where a consumer that
     * never had that provider sends it, so every consumer's retry of a key lands on one provider.
     */
    @Test
    void aRoutedAwayProvidersKeysGoToTheirNextChoiceAndOthersStay() {
        List<Invoker<Object>> all = TestInvokers.weighted(120, 140, 160, 180, 200, 220);
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Rendezvous());
        Map<String, Invoker<Object>> owner = new HashMap<>();
        for (int k = 0; k < 600; k++) {
            owner.put("user-" + k, pick(polylb, all, call("get", "user-" + k)));
        }
        for (Invoker<Object> away : all) {
            List<Invoker<Object>> subset = new ArrayList<>(all);
            subset.remove(away);
            // Another consumer, whose list never held the routed-away provider.
            PolylbLoadBalance without = track(new PolylbLoadBalance.Rendezvous());
            int moved = 0;
            for (Map.Entry<String, Invoker<Object>> e : owner.entrySet()) {
                Invoker<Object> now = pick(polylb, subset, call("get", e.getKey()));
                assertSame(pick(without, subset, call("get", e.getKey())), now, e.getKey());
                if (e.getValue() == away) {
                    assertNotSame(away, now);
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

    /** Rendezvous honours weights exactly: keys are shared out as the weights say. */
    @Test
    void keysFollowProviderWeights() {
        List<Invoker<Object>> list = TestInvokers.weighted(100, 100, 200, 0);
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Rendezvous());
        Map<Invoker<Object>, Integer> counts = new HashMap<>();
        for (int k = 0; k < 4000; k++) {
            counts.merge(pick(polylb, list, call("get", "user-" + k)), 1, Integer::sum);
        }
        assertNull(counts.get(list.get(3)), "weight 0 took keys: " + counts);
        // Expected 1000, 1000, 2000; within 5 binomial standard deviations (27, 27, 32).
        assertTrue(Math.abs(counts.get(list.get(0)) - 1000) < 140, counts.toString());
        assertTrue(Math.abs(counts.get(list.get(1)) - 1000) < 140, counts.toString());
        assertTrue(Math.abs(counts.get(list.get(2)) - 2000) < 160, counts.toString());
    }

    /**
     * slowstart.* and maglev's table size do not apply: the call fails naming the key (subset.*:
     * SubsetAdapterTest).
     */
    @Test
    void optionsItCannotHonourFailTheCall() {
        for (String[] c : new String[][] {
            {"polylb.config=slowstart.windowMs=1000", "slowstart.windowMs"},
            {"polylb.config=maglev.tableSize=7", "maglev.tableSize"},
        }) {
            List<Invoker<Object>> list = providers(3, c[0]);
            RpcException e = assertThrows(RpcException.class,
                    () -> pick(track(new PolylbLoadBalance.Rendezvous()), list, call("get", "k")), c[0]);
            assertEquals(Status.INVALID_CONFIG, ((PolylbException) e.getCause()).status(), c[0]);
            assertTrue(e.getMessage().contains(c[1]), e.getMessage());
        }
    }
}
