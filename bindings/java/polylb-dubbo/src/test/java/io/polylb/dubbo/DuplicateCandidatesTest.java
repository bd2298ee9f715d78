package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.LeastActiveLoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.RandomLoadBalance;
import org.junit.jupiter.api.Test;

/**
 * Dubbo's AbstractClusterInvoker.reselect, over more than {@code dubbo.reselect.count} (10)
 * providers, draws 10 at random with repeats (its de-duplication condition is an "or") and hands
 * the list, repeats included, to the LoadBalance; random and leastactive weigh every element, so
 * a provider listed k times gets k times its weight. The adapter does the same (against Dubbo's
 * own balancers, same lists).
 */
class DuplicateCandidatesTest {
    private static final int DRAWS = 7000;

    /** Twelve providers, p2 with weight 300, the others 100; a reselect-like list with repeats. */
    private static List<Invoker<Object>> providers() {
        int[] weights = new int[12];
        java.util.Arrays.fill(weights, 100);
        weights[1] = 300;
        return TestInvokers.weighted(weights);
    }

    private static List<Invoker<Object>> reselectList(List<Invoker<Object>> all) {
        Invoker<Object> p1 = all.get(0);
        Invoker<Object> p2 = all.get(1);
        Invoker<Object> p3 = all.get(2);
        // Weights per element: 100 + 300 + 100 + 100 + 100 = 700 -> p1 3/7, p2 3/7, p3 1/7.
        return new ArrayList<>(List.of(p1, p2, p1, p1, p3));
    }

    private static int[] shares(LoadBalance lb, List<Invoker<Object>> all, boolean polylb) {
        List<Invoker<Object>> list = reselectList(all);
        int[] counts = new int[3];
        for (int i = 0; i < DRAWS; i++) {
            RpcInvocation inv = call("sayHello");
            if (polylb) {
                PolylbClusterFilter.beginInvocation(inv);
            }
            Invoker<Object> pick = lb.select(list, all.get(0).getUrl(), inv);
            if (polylb) {
                PolylbClusterFilter.releaseUnsent(inv); // a reselect pick of a call that then ends
            }
            counts[all.indexOf(pick)]++;
        }
        return counts;
    }

    private static void assertDubbosShares(String who, int[] counts) {
        assertEquals(DRAWS, counts[0] + counts[1] + counts[2], who + " picked outside the list");
        double[] expected = {3.0 / 7, 3.0 / 7, 1.0 / 7};
        for (int i = 0; i < 3; i++) {
            double mean = DRAWS * expected[i];
            double sd = Math.sqrt(DRAWS * expected[i] * (1 - expected[i]));
            assertTrue(Math.abs(counts[i] - mean) < 5 * sd,
                    who + ": p" + (i + 1) + " picked " + counts[i] + " times, Dubbo's share is " + Math.round(mean)
                            + " (counts " + java.util.Arrays.toString(counts) + ")");
        }
    }

    private static void check(LoadBalance dubbo, PolylbLoadBalance polylb) {
        List<Invoker<Object>> all = providers();
        try {
            // The full list first: the adapter registers all twelve, the reselect list is a subset.
            RpcInvocation first = call("sayHello");
            polylb.select(all, all.get(0).getUrl(), first);
            assertDubbosShares("Dubbo's own", shares(dubbo, all, false));
            assertDubbosShares("polylb", shares(polylb, all, true));
            assertEquals(0, OuterFilterFailureTest.activeIn(polylb.statsJson(TestInvokers.SERVICE)));
        } finally {
            polylb.destroy();
        }
    }

    @Test
    void randomWeighsARepeatedCandidateOncePerElement() {
        check(new RandomLoadBalance(), new PolylbLoadBalance.Random());
    }

    @Test
    void leastActiveWeighsARepeatedCandidateOncePerElement() {
        check(new LeastActiveLoadBalance(), new PolylbLoadBalance.LeastActive());
    }
}
