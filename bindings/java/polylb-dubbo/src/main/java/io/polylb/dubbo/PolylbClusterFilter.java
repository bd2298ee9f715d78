package io.polylb.dubbo;

import static org.apache.dubbo.common.constants.CommonConstants.CONSUMER;

import org.apache.dubbo.common.extension.Activate;
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
 *
 * <p>The end is taken from the result {@code invoke} returns, not through
 * {@code Filter.Listener}: Dubbo's cluster filter chain calls the listeners only when the whole
 * chain returned, so a cluster filter outside this one that throws after the cluster invoker
 * returned would leave the unsent picks in flight for good.
 */
@Activate(group = CONSUMER)
public class PolylbClusterFilter implements ClusterFilter {

    @Override
    public Result invoke(Invoker<?> invoker, Invocation invocation) throws RpcException {
        Selections selections = Selections.releasedAtEnd(invocation);
        Result result;
        try {
            result = invoker.invoke(invocation);
        } catch (RuntimeException | Error e) {
            Selections.leave(invocation);
            selections.releaseUnsent();
            throw e;
        }
        // This thread is done with the invocation (its selects are made); the end, perhaps on
        // another thread, drains the object found here.
        Selections.leave(invocation);
        return result.whenCompleteWithContext((r, t) -> {
            try {
                selections.releaseUnsent();
            } catch (RuntimeException ignored) {
                // Accounting must never fail the call it accounts for.
            }
        });
    }

    /**
     * For callers driving PolylbLoadBalance without Dubbo's cluster layer (benchmarks, tests):
     * what this filter does when an invocation starts. Without it, picks are undone at once (no
     * one would release them); with it, end the invocation with {@link #releaseUnsent}. The
     * calling thread holds the invocation as its current one until it ends it there, or begins
     * another.
     *
     * @param invocation the invocation about to be balanced
     */
    public static void beginInvocation(Invocation invocation) {
        Selections.releasedAtEnd(invocation);
    }

    /**
     * For callers driving PolylbLoadBalance without Dubbo's cluster layer (benchmarks, tests):
     * what this filter does when an invocation ends. Reports each of its picks that was never
     * sent {@link io.polylb.Outcome#CANCELLED}, and unmarks it.
     *
     * @param invocation the invocation that ended
     */
    public static void releaseUnsent(Invocation invocation) {
        Selections.releaseUnsent(invocation);
    }
}
