package io.polylb.dubbo;

import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;

/**
 * The benchmarks' way into the adapter's package (as GrpcPickBench into the gRPC policy's): a
 * pick's answer handed to {@link PolylbInvokerFilter} as the call's completion hands it, without
 * the call itself, whose cost is Dubbo's whatever the LoadBalance.
 */
public final class AdapterCalls {
    private AdapterCalls() {}

    /** The filter's report of {@code invoker}'s answer {@code response} to {@code invocation}. */
    public static void answered(PolylbInvokerFilter filter, Result response, Invoker<?> invoker,
            Invocation invocation) {
        filter.onResponse(response, invoker, invocation);
    }
}
