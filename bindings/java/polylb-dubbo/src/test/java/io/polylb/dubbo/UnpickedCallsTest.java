package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.invoker;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonParser;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.apache.dubbo.rpc.AppResponse;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.model.ApplicationModel;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Calls Dubbo sends without asking the LoadBalance: a cluster invoker returns a lone candidate
 * as it is (a router left one provider, a failover retry with one provider left), forking with
 * forks >= providers uses them all, sticky reuses the last one. Dubbo's RpcStatus (leastactive,
 * shortestresponse) counts every call a provider serves, so polylb must count these too.
 */
class UnpickedCallsTest {
    private static final String LB = "polylb-leastactive";
    /** Responses of calls sent and not answered yet. */
    private final List<CompletableFuture<AppResponse>> open = new ArrayList<>();

    /** The consumer's LoadBalance extension, the one Dubbo's cluster invokers use. */
    private static PolylbLoadBalance extension() {
        LoadBalance lb = ApplicationModel.defaultModel().getExtensionLoader(LoadBalance.class).getExtension(LB);
        return (PolylbLoadBalance) lb;
    }

    @AfterEach
    void cleanUp() {
        answerOpenCalls();
        extension().destroy();
    }

    private void answerOpenCalls() {
        for (CompletableFuture<AppResponse> response : open) {
            response.complete(new AppResponse("ok"));
        }
        open.clear();
    }

    private static int active(PolylbLoadBalance lb, String address) {
        int active = 0;
        for (String json : lb.statsJson(TestInvokers.SERVICE)) {
            for (JsonElement e : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                if (e.getAsJsonObject().get("address").getAsString().equals(address)) {
                    active += e.getAsJsonObject().get("active").getAsInt();
                }
            }
        }
        return active;
    }

    /** Sends {@code inv} to {@code provider} through the filter, as Dubbo's consumer chain does. */
    private Result send(Invoker<Object> provider, RpcInvocation inv) {
        return new PolylbInvokerFilter().invoke(provider, inv);
    }

    /** A provider whose calls stay open until {@link #answerOpenCalls}. */
    private TestInvokers.FakeInvoker provider(int n, String lb) {
        return new TestInvokers.FakeInvoker(invoker(n, "loadbalance=" + lb).getUrl()) {
            @Override
            public Result invoke(Invocation invocation) {
                CompletableFuture<AppResponse> response = new CompletableFuture<>();
                open.add(response);
                return new AsyncRpcResult(response, invocation);
            }
        };
    }

    @Test
    void callsToALoneCandidateCountAsInFlight() {
        PolylbLoadBalance lb = extension();
        Invoker<Object> a = provider(1, LB);
        Invoker<Object> b = provider(2, LB);
        List<Invoker<Object>> both = List.of(a, b);
        // polylb balances the service once (one call, ended).
        RpcInvocation first = call("sayHello");
        PolylbClusterFilter.beginInvocation(first);
        Invoker<Object> chosen = lb.select(both, a.getUrl(), first);
        send(chosen, first);
        answerOpenCalls();
        PolylbClusterFilter.releaseUnsent(first);
        assertEquals(0, active(lb, "10.0.0.1:20880") + active(lb, "10.0.0.2:20880"));

        // A router leaves b alone for three calls: the cluster sends them without a select.
        for (int i = 0; i < 3; i++) {
            send(b, call("sayHello"));
        }
        assertEquals(3, active(lb, "10.0.0.2:20880"), "b serves three calls");

        // leastactive over both then avoids b, as Dubbo's does with RpcStatus counting them.
        for (int i = 0; i < 20; i++) {
            RpcInvocation inv = call("sayHello");
            PolylbClusterFilter.beginInvocation(inv);
            Invoker<Object> pick = lb.select(both, a.getUrl(), inv);
            PolylbClusterFilter.releaseUnsent(inv);
            assertSame(a, pick, "pick " + i);
        }

        answerOpenCalls();
        assertEquals(0, active(lb, "10.0.0.2:20880"), "b's calls ended");
    }

    /**
     * Calls a router sends to a lone provider count where the method is balanced: a name with
     * no UTF-8 form (a generic call's, with a lone surrogate) at the service level, as its
     * selects are (before, they went uncounted while the service was under the name cap).
     */
    @Test
    void unpickedCallsOfANameWithoutUtf8FormCountAtTheServiceLevel() {
        PolylbLoadBalance lb = extension();
        Invoker<Object> a = provider(1, LB);
        Invoker<Object> b = provider(2, LB);
        List<Invoker<Object>> both = List.of(a, b);
        for (String name : List.of("say\uD800", "sayHello")) {
            RpcInvocation first = TestInvokers.genericCall(name, "k");
            PolylbClusterFilter.beginInvocation(first);
            send(lb.select(both, a.getUrl(), first), first);
            answerOpenCalls();
            PolylbClusterFilter.releaseUnsent(first);
            for (int i = 0; i < 3; i++) {
                send(b, TestInvokers.genericCall(name, "k"));
            }
            assertEquals(3, active(lb, "10.0.0.2:20880"), name);
            answerOpenCalls();
            assertEquals(0, active(lb, "10.0.0.2:20880"), name);
        }
    }

    @Test
    void withoutPolylbsFiltersPicksAreNotLeftInFlight() {
        // filter="-default" (or "-polylb") on a reference removes both filters: nothing reports
        // or releases picks. Dubbo's leastactive then sees no active calls (no ActiveLimitFilter)
        // and is weighted random; polylb's counts must not grow with every pick.
        PolylbLoadBalance lb = new PolylbLoadBalance.LeastActive();
        try {
            List<Invoker<Object>> list = TestInvokers.weighted(100, 900);
            int light = 0;
            for (int i = 0; i < 2000; i++) {
                if (lb.select(list, list.get(0).getUrl(), call("sayHello")) == list.get(0)) {
                    light++;
                }
            }
            assertEquals(0, active(lb, "10.0.0.1:20880") + active(lb, "10.0.0.2:20880"));
            // Weighted random: about 200 of 2000 (a leak would even the counts out: about 1000).
            assertTrue(light > 100 && light < 320, "weight-100 provider picked " + light + " times of 2000");
        } finally {
            lb.destroy();
        }
    }

    @Test
    void picksAfterTheInvocationEndedAreNotLeftInFlight() {
        // Failback's retry timer selects again with the same invocation after PolylbClusterFilter
        // ended it (reselect discards a pick of the provider that failed): nothing would release
        // those picks any more.
        PolylbLoadBalance lb = new PolylbLoadBalance.LeastActive();
        try {
            List<Invoker<Object>> list = TestInvokers.weighted(100, 100);
            RpcInvocation inv = call("sayHello");
            PolylbClusterFilter.beginInvocation(inv);
            lb.select(list, list.get(0).getUrl(), inv);
            PolylbClusterFilter.releaseUnsent(inv); // the invocation failed: failback retries later
            for (int retry = 0; retry < 5; retry++) {
                lb.select(list, list.get(0).getUrl(), inv); // discarded by reselect, never sent
            }
            assertEquals(0, active(lb, "10.0.0.1:20880") + active(lb, "10.0.0.2:20880"));
        } finally {
            lb.destroy();
        }
    }

    @Test
    void callsOfOtherLoadBalancesAreNotTouched() {
        Invoker<Object> a = provider(1, "random");
        RpcInvocation inv = call("sayHello");
        send(a, inv);
        assertNull(Selections.of(inv));
    }
}
