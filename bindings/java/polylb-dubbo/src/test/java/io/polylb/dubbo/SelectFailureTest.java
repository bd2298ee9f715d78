package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.genericCall;
import static io.polylb.dubbo.TestInvokers.invokers;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.Balancer;
import io.polylb.PolylbException;
import io.polylb.Status;
import java.util.List;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcException;
import org.junit.jupiter.api.Test;

/** What a LoadBalance may throw: Dubbo's callers handle RpcException, never polylb's own type. */
class SelectFailureTest extends AdapterTest {
    @Test
    void methodNameWithoutUtf8FormIsAnRpcException() {
        List<Invoker<Object>> list = invokers("weight=1", "weight=2");
        for (PolylbLoadBalance polylb : List.of(track(new PolylbLoadBalance.RoundRobin()),
                track(new PolylbLoadBalance.ConsistentHash()), track(new PolylbLoadBalance()))) {
            // A generic call names its method in a String: a lone surrogate has no UTF-8 form.
            RpcException e = assertThrows(RpcException.class, () -> pick(polylb, list, genericCall("say\uD800", "k")));
            assertTrue(e.getCause() instanceof PolylbException, String.valueOf(e.getCause()));
            assertEquals(Status.INVALID_UTF8, ((PolylbException) e.getCause()).status());
            assertTrue(e.getMessage().contains(TestInvokers.SERVICE), e.getMessage());
            // Other methods are unaffected.
            assertTrue(list.contains(pick(polylb, list, genericCall("sayHello", "k"))));
        }
    }

    @Test
    void methodCountLimitIsAnRpcException() {
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
        RpcException e = assertThrows(RpcException.class, () -> pick(polylb, list, call("oneMore")));
        assertEquals(Status.LIMIT_EXCEEDED, ((PolylbException) e.getCause()).status());
        // Methods interned before the table filled keep working.
        assertTrue(list.contains(pick(polylb, list, call("first"))));
    }
}
