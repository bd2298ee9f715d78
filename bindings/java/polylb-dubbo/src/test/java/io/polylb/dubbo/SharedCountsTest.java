package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.AppResponse;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcInvocation;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Where polylb's in-flight counts live (what leastactive sees): per LoadBalance extension of an
 * application and per serviceKey (group/interface:version), so two references to one service
 * with the same loadbalance share them, as Dubbo's RpcStatus is shared; unlike RpcStatus
 * (JVM-wide, per provider address and path), a reference to another group or version of the
 * service, or one using another polylb extension, counts apart.
 */
class SharedCountsTest {
    private static final String LB = "polylb-leastactive";
    private final List<CompletableFuture<AppResponse>> open = new ArrayList<>();

    @AfterEach
    void cleanUp() {
        open.forEach(r -> r.complete(new AppResponse("ok")));
        TestInvokers.extension(LB).destroy();
        TestInvokers.extension("polylb-p2c").destroy();
    }

    /** One reference's Invoker objects for providers 1 and 2 (each reference has its own). */
    private List<Invoker<Object>> reference(String lb, String group) {
        List<Invoker<Object>> list = new ArrayList<>();
        for (int n = 1; n <= 2; n++) {
            String query = "loadbalance=" + lb + (group == null ? "" : "&group=" + group);
            URL url = URL.valueOf("dubbo://10.0.0." + n + ":20880/" + TestInvokers.SERVICE + "?" + query);
            list.add(new TestInvokers.FakeInvoker(url) {
                @Override
                public Result invoke(Invocation invocation) {
                    CompletableFuture<AppResponse> response = new CompletableFuture<>();
                    open.add(response);
                    return new AsyncRpcResult(response, invocation);
                }
            });
        }
        return list;
    }

    private static RpcInvocation call() {
        return TestInvokers.call("sayHello");
    }

    /** Three calls through {@code ref} to its provider 1, left open. */
    private static void busy(String lb, List<Invoker<Object>> ref) {
        for (int i = 0; i < 3; i++) {
            RpcInvocation inv = call();
            PolylbClusterFilter.beginInvocation(inv);
            TestInvokers.extension(lb).select(ref, ref.get(0).getUrl(), inv);
            new PolylbInvokerFilter().invoke(ref.get(0), inv); // sent to provider 1 whatever the pick
            PolylbClusterFilter.releaseUnsent(inv);
        }
    }

    private static int picksOfProvider1(String lb, List<Invoker<Object>> ref) {
        int n = 0;
        for (int i = 0; i < 200; i++) {
            RpcInvocation inv = call();
            PolylbClusterFilter.beginInvocation(inv);
            if (TestInvokers.extension(lb).select(ref, ref.get(0).getUrl(), inv) == ref.get(0)) {
                n++;
            }
            PolylbClusterFilter.releaseUnsent(inv);
        }
        return n;
    }

    @Test
    void twoReferencesToOneServiceShareTheirCounts() {
        List<Invoker<Object>> first = reference(LB, null);
        List<Invoker<Object>> second = reference(LB, null);
        picksOfProvider1(LB, second); // the second reference exists before the first gets busy
        busy(LB, first);
        assertEquals(0, picksOfProvider1(LB, second), "the second reference ignored the first one's calls");
    }

    @Test
    void anotherGroupOrAnotherPolylbExtensionCountsApart() {
        busy(LB, reference(LB, null));
        // Group g2 of the same interface on the same providers: another serviceKey, other counts
        // (Dubbo's RpcStatus, keyed by address and path, would share them).
        int g2 = picksOfProvider1(LB, reference(LB, "g2"));
        assertTrue(g2 > 60 && g2 < 140, "group g2 saw the default group's calls: provider 1 picked " + g2 + "/200");
        // Another extension (polylb-p2c) for the same service: its own state, its own counts.
        List<Invoker<Object>> p2c = reference("polylb-p2c", null);
        int other = picksOfProvider1("polylb-p2c", p2c);
        assertTrue(other > 60 && other < 140, "polylb-p2c saw leastactive's calls: provider 1 picked " + other + "/200");
    }
}
