package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.gson.JsonElement;
import com.google.gson.JsonParser;
import io.polylb.Balancer;
import io.polylb.Invoker;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import org.apache.dubbo.remoting.TimeoutException;
import org.apache.dubbo.rpc.RpcException;
import org.junit.jupiter.api.Test;

/**
 * The core API's {@code call}/{@code callAsync} around Dubbo's own async calls, which fail with
 * Dubbo's exceptions: a Dubbo timeout is a TIMEOUT there too, as docs/outcomes.md says and as
 * the adapter's filter judges it (before: a failure).
 */
class DubboTimeoutsTest {
    private static long sum(Balancer lb, String field) {
        long total = 0;
        for (JsonElement e : JsonParser.parseString(lb.statsJson()).getAsJsonObject().getAsJsonArray("invokers")) {
            total += e.getAsJsonObject().get(field).getAsLong();
        }
        return total;
    }

    @Test
    void dubbosTimeoutsAreTimeoutsOfTheCoreApisCalls() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(List.of(Invoker.of(1, "10.0.0.1:20880"), Invoker.of(2, "10.0.0.2:20880")));
            int m = lb.method("m");
            CompletableFuture<Object> rpcTimeout = lb.callAsync(m, null, id -> CompletableFuture.failedFuture(
                    new RpcException(RpcException.TIMEOUT_EXCEPTION, "Invoke remote method timeout")));
            assertThrows(CompletionException.class, rpcTimeout::join);
            CompletableFuture<Object> remotingTimeout = lb.callAsync(m, null, id -> CompletableFuture.failedFuture(
                    new TimeoutException(false, null, "Waiting server-side response timeout")));
            assertThrows(CompletionException.class, remotingTimeout::join);
            CompletableFuture<Object> refused = lb.callAsync(m, null, id -> CompletableFuture.failedFuture(
                    new RpcException(RpcException.NETWORK_EXCEPTION, "connection refused")));
            assertThrows(CompletionException.class, refused::join);
            assertEquals(0, sum(lb, "active"));
            assertEquals(3, sum(lb, "failures"), "every one failed");
            assertEquals(2, sum(lb, "timeouts"), "two of them timed out");
        }
    }
}
