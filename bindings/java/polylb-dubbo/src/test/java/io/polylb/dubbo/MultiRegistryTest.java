package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.apache.dubbo.common.constants.CommonConstants.CONSUMER;
import static org.apache.dubbo.common.constants.CommonConstants.REFERENCE_FILTER_KEY;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.AppResponse;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.ClusterInvoker;
import org.apache.dubbo.rpc.cluster.directory.StaticDirectory;
import org.apache.dubbo.rpc.cluster.filter.DefaultFilterChainBuilder;
import org.apache.dubbo.rpc.cluster.support.registry.ZoneAwareClusterInvoker;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Multi-registry: Dubbo's ZoneAwareClusterInvoker (with its cluster filter chain) selects a
 * registry through the same LoadBalance, over one cluster invoker per registry whose URL is the
 * consumer's, weighted by each registry URL's {@code weight}; the registry's cluster invoker then
 * selects a provider with the same invocation.
 */
class MultiRegistryTest {
    static final String LB = "polylb-random";
    static final String REGISTRY = "registry://127.0.0.1:2181/org.apache.dubbo.registry.RegistryService";

    private static PolylbLoadBalance extension() {
        return TestInvokers.extension(LB);
    }

    @AfterEach
    void forget() {
        extension().destroy();
    }

    private static TestInvokers.FakeInvoker answering(int n) {
        URL url = TestInvokers.invoker(n, "loadbalance=" + LB).getUrl();
        return new TestInvokers.FakeInvoker(url) {
            @Override
            public Result invoke(Invocation invocation) {
                return AsyncRpcResult.newDefaultAsyncResult(new AppResponse(url.getAddress()), invocation);
            }
        };
    }

    /** One registry's cluster invoker: picks among its providers with the LoadBalance and sends. */
    private static final class RegistryClusterInvoker extends TestInvokers.FakeClusterInvoker {
        final URL consumerUrl;
        final List<Invoker<Object>> providers;
        final AtomicInteger served = new AtomicInteger();

        RegistryClusterInvoker(URL consumerUrl, int weight, List<Invoker<Object>> providers) {
            super(consumerUrl, URL.valueOf(REGISTRY + "?weight=" + weight));
            this.consumerUrl = consumerUrl;
            this.providers = providers;
        }

        @Override
        public Result invoke(Invocation invocation) {
            served.incrementAndGet();
            Invoker<Object> provider = extension().select(providers, consumerUrl, invocation);
            assertTrue(providers.contains(provider), provider + " is not a provider of this registry");
            return new PolylbInvokerFilter().invoke(provider, invocation);
        }
    }

    @Test
    void registriesAreBalancedByTheirWeightAndProvidersWithin() {
        URL consumerUrl = URL.valueOf("consumer://127.0.0.1/" + TestInvokers.SERVICE + "?loadbalance=" + LB
                + "&interface=" + TestInvokers.SERVICE);
        RegistryClusterInvoker light = new RegistryClusterInvoker(consumerUrl, 25, List.of(answering(1), answering(2)));
        RegistryClusterInvoker heavy = new RegistryClusterInvoker(consumerUrl, 75, List.of(answering(3), answering(4)));
        List<Invoker<Object>> registries = new ArrayList<>(List.of(light, heavy));
        ZoneAwareClusterInvoker<Object> zoneAware =
                new ZoneAwareClusterInvoker<>(new StaticDirectory<>(consumerUrl, registries));
        ClusterInvoker<Object> chain =
                new DefaultFilterChainBuilder().buildClusterInvokerChain(zoneAware, REFERENCE_FILTER_KEY, CONSUMER);

        int calls = 4000;
        for (int i = 0; i < calls; i++) {
            RpcInvocation inv = call("sayHello");
            Result result = chain.invoke(inv);
            assertFalse(result.hasException(), String.valueOf(result.getException()));
            assertNotNull(result.getValue());
        }
        // Registry weights 25:75 (Dubbo's getWeight for a cluster invoker): 1000 of 4000 expected,
        // sd = sqrt(4000 * 0.25 * 0.75) = 27.4; 5 sd either side.
        assertEquals(calls, light.served.get() + heavy.served.get());
        assertTrue(Math.abs(light.served.get() - 1000) < 137, "light registry served " + light.served.get());

        PolylbLoadBalance lb = extension();
        assertEquals(0, OuterFilterFailureTest.activeIn(lb.statsJson(TestInvokers.SERVICE)), "calls left in flight");
        assertEquals(0, OuterFilterFailureTest.activeIn(
                lb.statsJson(PolylbLoadBalance.REGISTRY_LEVEL_PREFIX + TestInvokers.SERVICE)), "registry picks in flight");
        // Registry-level picks (the consumer's serviceKey too) have a state of their own: the
        // providers' set holds the four providers only, the registries' set the two registries.
        ServiceState providers = lb.serviceState(TestInvokers.SERVICE);
        assertEquals(4, providers.set.size(), List.of(providers.set.invokers).toString());
        for (Invoker<?> member : providers.set.invokers) {
            assertFalse(member instanceof ClusterInvoker, "a registry's cluster invoker among the providers: "
                    + List.of(providers.set.invokers));
        }
        ServiceState registryLevel = lb.serviceState(PolylbLoadBalance.REGISTRY_LEVEL_PREFIX + TestInvokers.SERVICE);
        assertEquals(List.of(light, heavy), List.of(registryLevel.set.invokers));
    }
}
