package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.genericCall;
import static io.polylb.dubbo.TestInvokers.invokers;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.Balancer;
import io.polylb.PolylbException;
import io.polylb.Status;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.junit.jupiter.api.Test;

/**
 * A method name never fails a select, as Dubbo's balancers never fail one: a name the library
 * cannot take, or one past {@link PolylbLoadBalance#MAX_METHODS_PER_SERVICE}, is balanced at the
 * service level.
 */
class SelectFailureTest extends AdapterTest {
    /** Picks of {@code calls} on a round robin over weights 1 and 2: exactly 1:2 when shared. */
    private static Map<Invoker<Object>, Integer> picks(PolylbLoadBalance polylb, List<Invoker<Object>> list,
            List<Invocation> calls) {
        Map<Invoker<Object>, Integer> counts = new HashMap<>();
        for (Invocation call : calls) {
            counts.merge(pick(polylb, list, call), 1, Integer::sum);
        }
        return counts;
    }

    @Test
    void aMethodNameWithoutUtf8FormIsBalancedAtTheServiceLevel() {
        List<Invoker<Object>> list = invokers("weight=1", "weight=2");
        for (PolylbLoadBalance polylb : List.of(track(new PolylbLoadBalance.RoundRobin()),
                track(new PolylbLoadBalance.ConsistentHash()), track(new PolylbLoadBalance()))) {
            // A generic call names its method in a String: a lone surrogate has no UTF-8 form.
            for (int i = 0; i < 30; i++) {
                assertTrue(list.contains(pick(polylb, list, genericCall("say\uD800", "k" + i))));
            }
            ServiceState state = polylb.serviceState(TestInvokers.SERVICE);
            assertTrue(state.bindingsByMethod.containsKey(PolylbLoadBalance.SERVICE_LEVEL));
            assertFalse(state.bindingsByMethod.containsKey("say\uD800"));
            // Other methods are unaffected.
            assertTrue(list.contains(pick(polylb, list, genericCall("sayHello", "k"))));
            assertTrue(state.bindingsByMethod.containsKey("sayHello"));
        }
        // Round robin at the service level: two names without a UTF-8 form share one sequence.
        PolylbLoadBalance rr = track(new PolylbLoadBalance.RoundRobin());
        List<Invocation> calls = new ArrayList<>();
        for (int i = 0; i < 300; i++) {
            calls.add(genericCall(i % 2 == 0 ? "a\uD800" : "b\uDC00", "k"));
        }
        assertEquals(Map.of(list.get(0), 100, list.get(1), 200), picks(rr, list, calls));
    }

    @Test
    void aMethodPastTheLibrarysMethodTableIsBalancedAtTheServiceLevel() {
        List<Invoker<Object>> list = invokers("weight=1", "weight=2");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        assertTrue(list.contains(pick(polylb, list, call("first"))));
        ServiceState state = polylb.serviceState(TestInvokers.SERVICE);
        Balancer nativeBalancer = state.bindingsByMethod.get("first").target(state, state.set).balancer.balancer;
        // Fill the library's method table (2^20 names per balancer).
        PolylbException full = null;
        for (int i = 0; i < (1 << 21) && full == null; i++) {
            try {
                nativeBalancer.method("m" + i);
            } catch (PolylbException e) {
                full = e;
            }
        }
        assertTrue(full != null && full.status() == Status.LIMIT_EXCEEDED, String.valueOf(full));
        assertEquals(Map.of(list.get(0), 1, list.get(1), 2), picks(polylb, list,
                List.of(call("oneMore"), call("oneMore"), call("oneMore"))));
        assertTrue(state.bindingsByMethod.containsKey(PolylbLoadBalance.SERVICE_LEVEL));
        // Methods interned before the table filled keep working.
        assertTrue(list.contains(pick(polylb, list, call("first"))));
    }

    /**
     * A gateway forwarding generic calls with names its callers choose: past the cap, new names
     * share the service level, so the adapter's state stops growing and real methods that come
     * later are still balanced (before, every name took a binding and a slot in the library's
     * 2^20-name table, and once it was full every new method failed for good).
     */
    @Test
    void methodsPastTheCapShareTheServiceLevel() {
        List<Invoker<Object>> list = invokers("weight=1", "weight=2");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        int cap = PolylbLoadBalance.MAX_METHODS_PER_SERVICE;
        for (int i = 0; i < cap; i++) {
            assertTrue(list.contains(pick(polylb, list, genericCall("m" + i, "x"))));
        }
        ServiceState state = polylb.serviceState(TestInvokers.SERVICE);
        assertEquals(cap, state.bindingsByMethod.size());
        List<Invocation> past = new ArrayList<>();
        for (int i = 0; i < 3 * 1000; i++) {
            past.add(genericCall("bogus" + i, "x"));
        }
        assertEquals(Map.of(list.get(0), 1000, list.get(1), 2000), picks(polylb, list, past));
        assertEquals(cap + 1, state.bindingsByMethod.size(), "the service level's binding only");
        assertTrue(list.contains(pick(polylb, list, call("sayHello", "x"))));
        // A method bound before the cap keeps its own state: its picks still follow its sequence.
        assertEquals(Map.of(list.get(0), 1, list.get(1), 2), picks(polylb, list,
                List.of(genericCall("m7", "x"), genericCall("m7", "x"), genericCall("m7", "x"))));
    }
}
