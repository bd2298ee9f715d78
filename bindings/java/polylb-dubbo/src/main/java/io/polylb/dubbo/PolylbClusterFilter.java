package io.polylb.dubbo;

import static org.apache.dubbo.common.constants.CommonConstants.CONSUMER;

import org.apache.dubbo.common.extension.Activate;
import org.apache.dubbo.rpc.BaseFilter;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.cluster.filter.ClusterFilter;

/**
 * When a whole invocation ends (all failover attempts), releases the polylb picks Dubbo never
 * sent (a reselect replaced them, or an error came first), so in-flight counts stay exact. It
 * marks each invocation it wraps: picks of other invocations would never be released, so the
 * LoadBalance undoes them at once.
 */
@Activate(group = CONSUMER)
public class PolylbClusterFilter implements ClusterFilter, BaseFilter.Listener {

    @Override
    public Result invoke(Invoker<?> invoker, Invocation invocation) throws RpcException {
        Selections.releasedAtEnd(invocation);
        return invoker.invoke(invocation);
    }

    @Override
    public void onResponse(Result appResponse, Invoker<?> invoker, Invocation invocation) {
        Selections.releaseUnsent(invocation);
    }

    @Override
    public void onError(Throwable t, Invoker<?> invoker, Invocation invocation) {
        Selections.releaseUnsent(invocation);
    }

    /**
     * For callers driving PolylbLoadBalance without Dubbo's cluster layer (benchmarks, tests):
     * what this filter does when an invocation starts. Without it, picks are undone at once (no
     * one would release them); with it, end the invocation with {@link #releaseUnsent}.
     */
    public static void beginInvocation(Invocation invocation) {
        Selections.releasedAtEnd(invocation);
    }

    /** For callers driving PolylbLoadBalance without Dubbo's cluster layer (benchmarks, tests). */
    public static void releaseUnsent(Invocation invocation) {
        Selections.releaseUnsent(invocation);
    }
}
