package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.PolylbException;
import io.polylb.Status;
import java.util.List;
import java.util.Map;
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
class RendezvousAdapterTest extends HashingAdapterTest {
    /**
     * The cross-language contract: providers 1..8 at 10.0.0.&lt;id&gt;:20880, weight 100 each, key
     * "user-&lt;i&gt;" goes to this id. Computed once from the Rust library; the core's
     * {@code RendezvousTest}, the Go and the Python tests assert the same, and all must agree.
     */
    private static final int[] CROSS_LANGUAGE_PICKS = {2, 6, 7, 2, 1, 6, 8, 3, 8, 3};

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
        assertGenericNamePicksAsTheNamedAdapter(track(new PolylbLoadBalance.Rendezvous()), "rendezvous");
    }

    /**
     * (hash.nodes, below the ring's minimum of 4, is the ring's key and not passed to rendezvous.)
     * String.valueOf of each hashed argument is the key: 42 and "42" are the same key, as in Dubbo.
     */
    @Test
    void keysFollowHashArgumentsAndGenericCalls() {
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Rendezvous());
        assertKeysFollowHashArgumentsAndGenericCalls(polylb, "hash.arguments=1&hash.nodes=2",
                (list, k) -> assertSame(pick(polylb, list, call("findUser", "a", String.valueOf(k))),
                        pick(polylb, list, call("findUser", "a", Integer.valueOf(k)))));
    }

    /**
     * A provider routed out of the call's list (Dubbo's reselect after a failed attempt passes the
     * list without it too) is not a candidate: only its keys move, each to where a consumer that
     * never had that provider sends it, so every consumer's retry of a key lands on one provider.
     */
    @Test
    void aRoutedAwayProvidersKeysGoToTheirNextChoiceAndOthersStay() {
        assertOnlyTheRoutedAwayProvidersKeysMove(track(new PolylbLoadBalance.Rendezvous()),
                TestInvokers.weighted(120, 140, 160, 180, 200, 220), subset -> {
                    // Another consumer, whose list never held the routed-away provider.
                    PolylbLoadBalance without = track(new PolylbLoadBalance.Rendezvous());
                    return (key, now, moved) -> assertSame(pick(without, subset, call("get", key)), now, key);
                });
    }

    /** Rendezvous honours weights exactly: keys are shared out as the weights say. */
    @Test
    void keysFollowProviderWeights() {
        List<Invoker<Object>> list = TestInvokers.weighted(100, 100, 200, 0);
        Map<Invoker<Object>, Integer> counts =
                assertKeysFollowWeights100100200(track(new PolylbLoadBalance.Rendezvous()), list);
        assertNull(counts.get(list.get(3)), "weight 0 took keys: " + counts);
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
