package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.List;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invoker;
import org.junit.jupiter.api.Test;

/**
 * A method no longer called (a generic call's name, a method called once at start-up) must not
 * keep the provider set of its last call reachable: registry refreshes destroy those Invoker
 * objects, and a service balances up to 4096 method names each.
 */
class StaleBindingRetentionTest extends AdapterTest {
    private static List<Invoker<Object>> generation(int weight) {
        List<Invoker<Object>> list = new ArrayList<>();
        for (int i = 1; i <= 10; i++) {
            list.add(new TestInvokers.FakeInvoker(URL.valueOf("dubbo://10.0.0." + i + ":20880/"
                    + TestInvokers.SERVICE + "?side=provider&weight=" + weight)));
        }
        return list;
    }

    @Test
    void aMethodNoLongerCalledKeepsNoDestroyedInvokers() throws Exception {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.LeastActive());
        List<WeakReference<Object>> destroyed = new ArrayList<>();
        List<Invoker<Object>> current = generation(100);
        for (int round = 0; round < 50; round++) {
            pick(lb, current, call("once" + round)); // each name called once, as generic calls may be
            pick(lb, current, call("sayHello"));
            List<Invoker<Object>> next = generation(100 + round + 1); // a refresh: new objects, new weights
            pick(lb, next, call("sayHello"));
            for (Invoker<Object> old : current) {
                old.destroy();
                destroyed.add(new WeakReference<>(old));
            }
            current = next;
            pick(lb, current, call("sayHello"));
        }
        pick(lb, generation(1000), call("sayHello"));
        current = null;
        // Of the 500 destroyed objects, at most the last generation stays (the current set's aliases).
        long reachable = 0;
        for (int attempt = 0; attempt < 20; attempt++) {
            System.gc();
            Thread.sleep(10);
            reachable = destroyed.stream().filter(r -> r.get() != null).count();
            if (reachable <= 10) {
                break;
            }
        }
        assertEquals(10, Math.max(reachable, 10),
                reachable + " destroyed Invoker objects still reachable after 50 refreshes");
    }
}
