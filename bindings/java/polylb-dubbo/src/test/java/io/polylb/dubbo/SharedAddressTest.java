package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.AppResponse;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.RpcInvocation;
import org.junit.jupiter.api.Test;

/**
 * Two providers on one host:port (Dubbo 3 serves {@code dubbo://} and {@code tri://} on one port):
 * the filters match each call to its own pick, not to the other provider's at the same address.
 */
class SharedAddressTest extends AdapterTest {
    /** A provider whose calls are refused, or answered. */
    static final class Provider extends TestInvokers.FakeInvoker {
        final boolean refuses;

        Provider(String url, boolean refuses) {
            super(URL.valueOf(url));
            this.refuses = refuses;
        }

        @Override
        public Result invoke(Invocation invocation) {
            if (refuses) {
                throw new RpcException(RpcException.NETWORK_EXCEPTION, "connection refused");
            }
            return AsyncRpcResult.newDefaultAsyncResult(new AppResponse("ok"), invocation);
        }
    }

    static Map<Long, JsonObject> rowsById(PolylbLoadBalance lb) {
        Map<Long, JsonObject> rows = new HashMap<>();
        for (String json : lb.statsJson(TestInvokers.SERVICE)) {
            for (JsonElement row : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                rows.put(row.getAsJsonObject().get("id").getAsLong(), row.getAsJsonObject());
            }
        }
        return rows;
    }

    /**
     * Forking selects its forks first, then sends them all with the one invocation: the refused
     * call is charged to the provider that refused it, in either order of sending.
     */
    @Test
    void forkedCallsToTwoProvidersOnOneAddressAreEachChargedToTheirOwn() {
        for (boolean refusedFirst : new boolean[] {true, false}) {
            Provider dubbo = new Provider("dubbo://10.0.0.1:20880/" + TestInvokers.SERVICE, true);
            Provider tri = new Provider("tri://10.0.0.1:20880/" + TestInvokers.SERVICE, false);
            Provider other = new Provider("dubbo://10.0.0.2:20880/" + TestInvokers.SERVICE, false);
            List<Invoker<Object>> list = List.of(dubbo, tri, other);
            PolylbLoadBalance lb = track(new PolylbLoadBalance.RoundRobin());
            RpcInvocation invocation = TestInvokers.call("sayHello");
            PolylbClusterFilter.beginInvocation(invocation);
            // forks=2: two selects with the invocation, as ForkingClusterInvoker makes them.
            assertSame(dubbo, lb.select(list, list.get(0).getUrl(), invocation));
            assertSame(tri, lb.select(list, list.get(0).getUrl(), invocation));
            PolylbInvokerFilter filter = new PolylbInvokerFilter();
            if (refusedFirst) {
                assertThrows(RpcException.class, () -> filter.invoke(dubbo, invocation));
                filter.invoke(tri, invocation);
            } else {
                filter.invoke(tri, invocation);
                assertThrows(RpcException.class, () -> filter.invoke(dubbo, invocation));
            }
            PolylbClusterFilter.releaseUnsent(invocation);

            Map<Long, JsonObject> rows = rowsById(lb);
            JsonObject refused = rows.get(lb.serviceState(TestInvokers.SERVICE).idOf(dubbo.getUrl()));
            JsonObject answered = rows.get(lb.serviceState(TestInvokers.SERVICE).idOf(tri.getUrl()));
            assertEquals(1, refused.get("failures").getAsInt(), "the dubbo:// provider refused");
            assertEquals(0, refused.get("succeeded").getAsInt(), "the dubbo:// provider refused");
            assertEquals(1, answered.get("succeeded").getAsInt(), "the tri:// provider answered");
            assertEquals(0, answered.get("failures").getAsInt(), "the tri:// provider answered");
            assertEquals(0, refused.get("active").getAsInt() + answered.get("active").getAsInt());
        }
    }
}
