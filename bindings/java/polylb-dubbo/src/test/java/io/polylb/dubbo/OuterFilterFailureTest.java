package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.apache.dubbo.common.constants.CommonConstants.CONSUMER;
import static org.apache.dubbo.common.constants.CommonConstants.REFERENCE_FILTER_KEY;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.gson.JsonElement;
import com.google.gson.JsonParser;
import java.util.List;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.extension.Activate;
import org.apache.dubbo.rpc.AppResponse;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.Filter;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.ClusterInvoker;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.cluster.filter.ClusterFilter;
import org.apache.dubbo.rpc.cluster.filter.DefaultFilterChainBuilder;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A consumer filter outside polylb's that throws after the inner chain returned. Dubbo's filter
 * chains (DefaultFilterChainBuilder: CopyOfFilterChainNode + CallbackRegistrationInvoker) then
 * call no filter listener inside the thrower, so an accounting that relied on
 * {@code Filter.Listener} never ended the pick. The chains here are Dubbo's own, built from the
 * activated extensions as a reference builds them.
 */
class OuterFilterFailureTest {
    static final String LB = "polylb-leastactive";
    /** Activates the throwing filters below (Activate#value: a URL parameter). */
    static final String THROW_KEY = "polylbtest.throwafter";

    /** Outside PolylbInvokerFilter (lower order); throws once the inner chain returned. */
    @Activate(group = CONSUMER, value = THROW_KEY, order = -1_000_000)
    public static class ThrowAfterFilter implements Filter {
        @Override
        public Result invoke(Invoker<?> invoker, Invocation invocation) throws RpcException {
            invoker.invoke(invocation);
            throw new RpcException("an outer consumer filter failed after the call was sent");
        }
    }

    /** Outside PolylbClusterFilter (lower order); throws once the cluster invoker returned. */
    @Activate(group = CONSUMER, value = THROW_KEY, order = -1_000_000)
    public static class ThrowAfterClusterFilter implements ClusterFilter {
        @Override
        public Result invoke(Invoker<?> invoker, Invocation invocation) throws RpcException {
            invoker.invoke(invocation);
            throw new RpcException("an outer cluster filter failed after the cluster invoker returned");
        }
    }

    private static PolylbLoadBalance extension() {
        return TestInvokers.extension(LB);
    }

    @AfterEach
    void forget() {
        extension().destroy();
    }

    static int inFlight(PolylbLoadBalance lb) {
        return activeIn(lb.statsJson(TestInvokers.SERVICE));
    }

    /** Calls in flight, summed over stats JSONs. */
    static int activeIn(List<String> stats) {
        int active = 0;
        for (String json : stats) {
            for (JsonElement e : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                active += e.getAsJsonObject().get("active").getAsInt();
            }
        }
        return active;
    }

    private static TestInvokers.FakeInvoker answering(int n) {
        URL url = TestInvokers.invoker(n, "loadbalance=" + LB + "&" + THROW_KEY + "=true").getUrl();
        return new TestInvokers.FakeInvoker(url) {
            @Override
            public Result invoke(Invocation invocation) {
                return AsyncRpcResult.newDefaultAsyncResult(new AppResponse("ok"), invocation);
            }
        };
    }

    @Test
    void aSentCallEndsWhenAnOuterFilterThrowsAfterIt() {
        PolylbLoadBalance lb = extension();
        List<Invoker<Object>> providers = List.of(answering(1), answering(2));
        for (int i = 0; i < 5; i++) {
            RpcInvocation inv = call("sayHello");
            PolylbClusterFilter.beginInvocation(inv);
            Invoker<Object> chosen = lb.select(providers, providers.get(0).getUrl(), inv);
            Invoker<Object> chain = new DefaultFilterChainBuilder().buildInvokerChain(chosen, REFERENCE_FILTER_KEY, CONSUMER);
            RpcException e = assertThrows(RpcException.class, () -> chain.invoke(inv));
            assertNotNull(e.getMessage());
            PolylbClusterFilter.releaseUnsent(inv);
            assertEquals(0, inFlight(lb), "call " + i + " answered, yet still counted in flight");
        }
    }

    @Test
    void unsentPicksAreReleasedWhenAnOuterClusterFilterThrows() {
        PolylbLoadBalance lb = extension();
        List<Invoker<Object>> providers = List.of(answering(1), answering(2));
        // A cluster invoker that picks and then answers without sending the pick (as after a
        // reselect or an error before sending).
        ClusterInvoker<Object> cluster = new PickingClusterInvoker(lb, providers);
        ClusterInvoker<Object> chain = new DefaultFilterChainBuilder()
                .buildClusterInvokerChain(cluster, REFERENCE_FILTER_KEY, CONSUMER);
        for (int i = 0; i < 5; i++) {
            RpcInvocation inv = call("sayHello");
            assertThrows(RpcException.class, () -> chain.invoke(inv));
            assertEquals(0, inFlight(lb), "invocation " + i + " ended, yet its unsent pick is in flight");
        }
    }

    private static final class PickingClusterInvoker extends TestInvokers.FakeClusterInvoker {
        private final LoadBalance lb;
        private final List<Invoker<Object>> providers;
        private final URL url;

        PickingClusterInvoker(LoadBalance lb, List<Invoker<Object>> providers) {
            this(lb, providers, URL.valueOf("consumer://127.0.0.1/" + TestInvokers.SERVICE + "?" + THROW_KEY + "=true"));
        }

        private PickingClusterInvoker(LoadBalance lb, List<Invoker<Object>> providers, URL url) {
            super(url, url);
            this.lb = lb;
            this.providers = providers;
            this.url = url;
        }

        @Override
        public Result invoke(Invocation invocation) {
            assertNotNull(lb.select(providers, url, invocation));
            return AsyncRpcResult.newDefaultAsyncResult(new AppResponse("not sent"), invocation);
        }
    }
}
