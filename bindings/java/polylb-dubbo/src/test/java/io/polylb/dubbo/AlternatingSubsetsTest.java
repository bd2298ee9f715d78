package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invoker;
import org.junit.jupiter.api.Test;

/**
 * Two routers (or two references' routers) whose subsets of one service take turns on every
 * call: the check for destroyed providers, an O(n) walk over the set, must not run per call, and
 * a provider that leaves must still be dropped.
 */
class AlternatingSubsetsTest extends AdapterTest {
    private static final AtomicLong AVAILABILITY_READS = new AtomicLong();

    private static List<Invoker<Object>> providers(int n) {
        List<Invoker<Object>> list = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            list.add(new TestInvokers.CountingInvoker(URL.valueOf("dubbo://10.0." + (i / 250) + "." + (i % 250) + ":20880/"
                    + TestInvokers.SERVICE + "?side=provider&weight=100"), AVAILABILITY_READS));
        }
        return list;
    }

    /** {@code calls} selects over two routers' subsets of {@code all} in turn. */
    private static void takeTurns(PolylbLoadBalance lb, List<Invoker<Object>> all, int calls) {
        List<Invoker<Object>> routerA = new ArrayList<>(all.subList(0, 300));
        List<Invoker<Object>> routerB = new ArrayList<>(all.subList(0, 700));
        for (int i = 0; i < calls; i++) {
            pick(lb, i % 2 == 0 ? routerA : routerB, call("sayHello"));
        }
    }

    @Test
    void subsetsTakingTurnsDoNotWalkTheSetOnEveryCall() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.Random());
        List<Invoker<Object>> all = providers(1000);
        pick(lb, all, call("sayHello"));
        takeTurns(lb, all, 10);
        AVAILABILITY_READS.set(0);
        int calls = 1000;
        takeTurns(lb, all, calls);
        // Before: each call walked the 1,000 members for destroyed ones (300 to 700 reads a call).
        long reads = AVAILABILITY_READS.get();
        assertTrue(reads < 10 * calls, reads + " availability reads for " + calls + " selects among subsets");
    }

    @Test
    void aProviderThatLeavesIsStillDroppedWhileSubsetsTakeTurns() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.Random());
        List<Invoker<Object>> all = providers(1000);
        pick(lb, all, call("sayHello"));
        takeTurns(lb, all, 10);
        all.get(999).destroy(); // the registry removed it; both routers' subsets go on as before
        takeTurns(lb, all, 2 * 1024 + 2);
        assertEquals(999, lb.serviceState(TestInvokers.SERVICE).set.size(), "the destroyed provider is still a member");
    }
}
