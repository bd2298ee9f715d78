package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.util.List;
import org.apache.dubbo.rpc.Invoker;
import org.junit.jupiter.api.Test;

/**
 * Two references to one service: each holds its own invoker and URL objects of the same
 * providers, and their calls take turns. A method's resolved configuration is kept across them
 * (it was rebuilt, under the service's lock, on every call); a reference whose providers say
 * something else still gets its own.
 */
class TwoReferencesTest extends AdapterTest {
    private static final String PARAMS = "side=provider&weight=100";

    @Test
    void callsThroughTwoReferencesKeepTheMethodsConfiguration() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.Random());
        List<Invoker<Object>> first = TestInvokers.invokers(PARAMS, PARAMS, PARAMS);
        List<Invoker<Object>> second = TestInvokers.invokers(PARAMS, PARAMS, PARAMS);
        assertNotSame(first.get(0).getUrl(), second.get(0).getUrl());
        pick(lb, first, call("sayHello"));
        pick(lb, second, call("sayHello"));
        ServiceState state = lb.serviceState(TestInvokers.SERVICE);
        ServiceState.MethodBinding binding = state.bindingsByMethod.get("sayHello");
        for (int i = 0; i < 100; i++) {
            pick(lb, i % 2 == 0 ? first : second, call("sayHello"));
        }
        assertSame(binding, state.bindingsByMethod.get("sayHello"), "the method's configuration was rebuilt");
    }

    @Test
    void aReferenceWhoseProvidersSaySomethingElseGetsItsOwnConfiguration() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.Random());
        List<Invoker<Object>> first = TestInvokers.invokers(PARAMS, PARAMS);
        List<Invoker<Object>> other = TestInvokers.invokers(
                PARAMS + "&hash.arguments=1", PARAMS + "&hash.arguments=1");
        pick(lb, first, call("sayHello"));
        ServiceState state = lb.serviceState(TestInvokers.SERVICE);
        ServiceState.MethodBinding binding = state.bindingsByMethod.get("sayHello");
        pick(lb, other, call("sayHello"));
        ServiceState.MethodBinding rebuilt = state.bindingsByMethod.get("sayHello");
        assertNotSame(binding, rebuilt);
        assertSame(other.get(0).getUrl(), rebuilt.configUrl);
        assertEquals(binding.config, rebuilt.config);
    }
}
