package io.polylb.dubbo;

import static org.apache.dubbo.common.constants.CommonConstants.CONSUMER;

import io.polylb.Outcome;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.extension.Activate;
import org.apache.dubbo.remoting.RemotingException;
import org.apache.dubbo.remoting.TimeoutException;
import org.apache.dubbo.remoting.transport.ExceedPayloadLimitException;
import org.apache.dubbo.rpc.Filter;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcException;

/**
 * Reports each attempt's latency and outcome to polylb. A consumer filter wraps each provider
 * invoker, so every failover attempt is timed on its own. Calls of services not balanced by
 * polylb pass through untouched (an attribute and a URL parameter lookup). A call Dubbo sends
 * without a polylb pick (a lone candidate, forking to all, sticky) is counted as well, as Dubbo's
 * RpcStatus counts it.
 *
 * <p>An outcome is a verdict on the provider (docs/outcomes.md). As in Dubbo's ActiveLimitFilter,
 * a response, even one carrying a business exception, is a success, except a provider's refusal
 * for its own limits that comes as a response (its TpsLimitFilter's, see isShedByProvider), a
 * failure; a timeout (an RpcException
 * timeout, or for an async call Dubbo's remoting TimeoutException) is {@link Outcome#TIMEOUT};
 * any other error a {@link Outcome#FAILURE}. Over Triple ({@code tri}, {@code grpc}) a unary call
 * completes normally whatever its gRPC status, with the status as the response's exception (see
 * TripleStatuses), and the status's code decides: an error of the service's own (INVALID_ARGUMENT,
 * NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, ABORTED,
 * OUT_OF_RANGE) is the provider's answer, a success with its latency, as a business exception is;
 * DEADLINE_EXCEEDED is a {@link Outcome#TIMEOUT}, CANCELLED a {@link Outcome#CANCELLED} when the
 * consumer cancelled (else a failure, below), any other status (UNAVAILABLE, RESOURCE_EXHAUSTED,
 * UNIMPLEMENTED, INTERNAL, UNKNOWN, DATA_LOSS) a {@link Outcome#FAILURE}: the provider could not
 * serve. (ActiveLimitFilter counts every status that
 * arrives in a response as a success.) A business exception of a method with plain Java types
 * comes back over Triple with status OK, as itself: a success, as over the dubbo protocol.
 * For {@code adaptive}, the provider's {@code lb_adaptive} reply is parsed as Dubbo's
 * AdaptiveLoadBalanceFilter parses it, fed to polylb, and stripped.
 *
 * <p>A user's cancel of an async call is no verdict on the provider, never a failure. The futures
 * users usually get (a {@code CompletableFuture} a service method returns, {@code
 * RpcContext.getServiceContext().getCompletableFuture()}, {@code RpcContext.getContext().getFuture()},
 * {@code asyncCall}) adapt a future derived from the one this filter hangs on, and a cancel does not
 * reach back: the call stays in flight and the provider's real answer (or Dubbo's timeout) is
 * reported when it arrives. ({@code com.alibaba.dubbo.rpc.RpcContext}'s future ignores cancel.)
 * Cancelling the call's own future, which Dubbo keeps for 2.6.x code ({@code
 * FutureContext.getCompatibleCompletableFuture()}), ends it at once: over the dubbo protocol it
 * completes with a CancellationException, over Triple (the future is Triple's DeadlineFuture) with
 * the status CANCELLED. Either is reported as {@link Outcome#CANCELLED}, which only undoes the
 * in-flight count. Triple gives the same CANCELLED to a call whose stream ended under it: the
 * connection to the provider closed or was reset (TripleClientCall.onClose), the server reset the
 * stream (RST_STREAM), or the provider sent CANCELLED as the call's status. The provider could not
 * serve: a {@link Outcome#FAILURE}. For a unary call such a status comes in a response built by
 * Triple's call listener, which marks it (TripleStatuses.isCancelledUnderTheCall; from Dubbo 3.2
 * on: before, every CANCELLED stays a cancel); for a stream, it is the only CANCELLED the
 * response observer hears of. A consumer that closes its own connection (its invoker destroyed,
 * the application stopping) ends the calls on it the same way: failures too. A unary Triple call
 * does not listen to the consumer's {@code RpcContext.getCancellationContext()}. An attempt Dubbo
 * never sent because the deadline propagated from an upstream call was already spent ("No time
 * left", RpcException TIMEOUT_TERMINATE, over dubbo and Triple) is a {@link Outcome#CANCELLED} too,
 * as is a request Dubbo could not encode, which never reached the provider (see isUnencodable).
 *
 * <p>A Triple streaming call (server, client or bi stream) is in flight while its stream is open,
 * although Triple completes its result as the stream opens (where Dubbo's ActiveLimitFilter ends
 * it): the call's response observer is wrapped (TripleStreams) and the call is reported when the
 * stream ends, by its status as above (OK or an error of the service's own a success, with the
 * stream's life as its latency; any other status a failure, CANCELLED included). The consumer's
 * abort (a cancel through its CancelableStreamObserver; onError or cancel on a bi or client
 * stream's request observer), which Triple tells no observer of, is a cancel: only an end from
 * the provider's side (its status, a closed connection, a reset stream) reaches the observer. A
 * stream whose write to the connection fails is cancelled by Triple without a word to anyone, and
 * stays counted in flight.
 *
 * <p>The outcome is taken from the result this filter's {@code invoke} returns, not through
 * {@code Filter.Listener}: Dubbo's filter chain (CallbackRegistrationInvoker) calls the
 * listeners only when the whole chain returned, so a filter outside this one that throws after
 * the call was sent would leave the pick in flight for good.
 */
@Activate(group = CONSUMER, order = Integer.MAX_VALUE)
public class PolylbInvokerFilter implements Filter {

    @Override
    public Result invoke(Invoker<?> invoker, Invocation invocation) throws RpcException {
        Selections selections = Selections.current(invocation);
        if (selections == null || selections.start(invoker.getUrl()) == null) {
            // Sent without a pick of polylb's for this provider (a cluster returns a lone
            // candidate without asking the LoadBalance, forking may send to all): Dubbo's
            // RpcStatus counts such calls too, so they are counted in flight like picks.
            PolylbLoadBalance.beginUnpicked(invoker, invocation);
        }
        int observerIndex = TripleStreams.responseObserverIndex(invocation, invoker.getUrl());
        TripleStreams.End stream = observerIndex < 0
                ? null
                : TripleStreams.watch(invocation, observerIndex, error -> onStreamEnd(error, invoker, invocation));
        Result result;
        try {
            result = invoker.invoke(invocation);
        } catch (RuntimeException | Error e) {
            if (stream == null || stream.claim()) {
                onError(e, invoker, invocation);
            }
            throw e;
        }
        // The callback hangs on the call's own future, which completes with the response
        // whatever the filters outside do with the result (or throw) once it is returned.
        return result.whenCompleteWithContext((r, t) -> {
            try {
                if (stream != null && t == null && r.getException() == null) {
                    TripleStreams.watchRequests(r, stream);
                    return; // the stream opened: its end is reported
                }
                if (stream != null && !stream.claim()) {
                    return; // the stream ended already
                }
                if (t == null) {
                    onResponse(r, invoker, invocation);
                } else {
                    onError(t, invoker, invocation);
                }
            } catch (RuntimeException ignored) {
                // Accounting must never fail the call it accounts for.
            }
        });
    }

    /**
     * A Triple stream ended ({@code error} null: completed with status OK). Its latency is the
     * stream's life, compared only with other streams of the same method (polylb keeps its
     * latency estimates per method).
     */
    void onStreamEnd(Throwable error, Invoker<?> invoker, Invocation invocation) {
        Selections.Selection s = finish(invoker, invocation);
        if (s == null) {
            return;
        }
        Outcome outcome = streamOutcome(error);
        if (outcome == Outcome.SUCCESS) {
            report(s, elapsedUs(s), outcome);
        } else {
            report(s, outcome);
        }
    }

    /**
     * The outcome of a Triple stream that ended with {@code error} (null: completed). Triple
     * tells the response observer of the stream's end only when the stream ended from the
     * provider's side (ObserverToClientCallListenerAdapter.onClose); the consumer's own cancel
     * (TripleClientCall.cancelByLocal) tells it nothing, and reaches here as a
     * CancellationException (TripleStreams.End.cancelled). So a CANCELLED status here is a stream
     * that ended under the call (a closed connection, a reset stream, the provider's status): a
     * failure.
     */
    static Outcome streamOutcome(Throwable error) {
        if (error == null || TripleStatuses.isAnswer(error)) {
            return Outcome.SUCCESS;
        }
        return TripleStatuses.isCancelled(error) ? Outcome.FAILURE : errorOutcome(error);
    }

    void onResponse(Result appResponse, Invoker<?> invoker, Invocation invocation) {
        Selections.Selection s = finish(invoker, invocation);
        if (s == null) {
            return;
        }
        Outcome outcome = outcomeOf(appResponse, invoker.getUrl());
        if (outcome != Outcome.SUCCESS) {
            if (s.adaptive) {
                appResponse.getAttachments().remove(PolylbLoadBalance.ADAPTIVE_ATTACHMENT);
            }
            report(s, outcome);
            return;
        }
        long elapsedUs = elapsedUs(s);
        if (s.adaptive) {
            try {
                DubboUrls.ProviderMetrics metrics = DubboUrls.parseAdaptiveAttachment(
                        appResponse.getAttachment(PolylbLoadBalance.ADAPTIVE_ATTACHMENT));
                if (metrics != null) {
                    s.balancer.reportProviderMetrics(s.method, s.id, metrics.providerTimeMs(), metrics.load(),
                            elapsedUs, 0);
                }
            } catch (RuntimeException ignored) {
                // Bad metrics must not fail the call (Dubbo drops them too).
            } finally {
                appResponse.getAttachments().remove(PolylbLoadBalance.ADAPTIVE_ATTACHMENT);
            }
        }
        report(s, elapsedUs, Outcome.SUCCESS);
    }

    void onError(Throwable t, Invoker<?> invoker, Invocation invocation) {
        Selections.Selection s = finish(invoker, invocation);
        if (s == null) {
            return;
        }
        report(s, errorOutcome(t));
    }

    /**
     * The outcome of an attempt whose call completed normally with {@code response}: as {@link
     * #outcomeOf(Throwable, URL)} its exception, except that a unary Triple call whose stream
     * ended under it with CANCELLED (TripleStatuses.isCancelledUnderTheCall) is a failure.
     */
    static Outcome outcomeOf(Result response, URL providerUrl) {
        Outcome outcome = outcomeOf(response.getException(), providerUrl);
        if (outcome == Outcome.CANCELLED && TripleStatuses.isCancelledUnderTheCall(response)) {
            return Outcome.FAILURE;
        }
        return outcome;
    }

    /**
     * The outcome of an attempt whose call completed normally, with {@code exception} in its
     * response (null for a value): the provider's answer, a success, unless Triple completed the
     * call with a status that is no answer (see TripleStatuses) or Dubbo did without sending it.
     */
    static Outcome outcomeOf(Throwable exception, URL providerUrl) {
        if (TripleStatuses.isErrorStatus(exception, providerUrl) || isNeverSent(exception)) {
            return errorOutcome(exception);
        }
        return isShedByProvider(exception) ? Outcome.FAILURE : Outcome.SUCCESS;
    }

    /** The provider's TpsLimitFilter's refusal: its message ends so (Dubbo 2.7 to 3.3). */
    private static final String TPS_REFUSAL = " because exceed max service tps.";
    private static final String TPS_LIMIT_FILTER = "org.apache.dubbo.rpc.filter.TpsLimitFilter";

    /**
     * The provider refused the call for its own limits, in a response rather than by an error: no
     * answer of the service's, but load shedding, a failure (docs/outcomes.md). From Dubbo 3.2 on,
     * a provider's TpsLimitFilter ({@code tps}) returns its refusal as the response's exception
     * (an RpcException of the generic code, never given to the service), so the consumer gets a
     * normal response carrying it; counted as the success of a business exception, with the few
     * µs of a refusal as its latency, a provider shedding load would look the fastest and
     * healthiest of all, and latency-aware strategies would send it more. So is an RpcException
     * carrying Dubbo's LIMIT_EXCEEDED code (a limit the provider hit serving the call). (A
     * provider's ExecuteLimitFilter, {@code executes}, throws instead: an error response, a
     * failure already.)
     */
    static boolean isShedByProvider(Throwable exception) {
        if (!(exception instanceof RpcException)) {
            return false;
        }
        RpcException e = (RpcException) exception;
        if (e.isLimitExceed()) {
            return true;
        }
        if (e.isBiz()) {
            return false;
        }
        StackTraceElement[] frames = e.getStackTrace();
        if (frames != null && frames.length > 0 && frames[0] != null
                && TPS_LIMIT_FILTER.equals(frames[0].getClassName())) {
            return true;
        }
        String message = e.getMessage();
        return message != null && message.endsWith(TPS_REFUSAL);
    }

    /** The outcome of an attempt that ended in error {@code t}. */
    static Outcome errorOutcome(Throwable t) {
        if (isCancellation(t)) {
            return Outcome.CANCELLED;
        }
        return isTimeout(t) ? Outcome.TIMEOUT : Outcome.FAILURE;
    }

    /**
     * A sync call's timeout arrives as an RpcException with the timeout code; an async call's as
     * the exception its future completed with: a CompletionException around Dubbo's remoting
     * TimeoutException (or around such an RpcException). Triple's DEADLINE_EXCEEDED is an
     * RpcException with the timeout code (TriRpcStatus.triCodeToDubboCode).
     */
    static boolean isTimeout(Throwable t) {
        t = unwrap(t);
        return t instanceof TimeoutException || (t instanceof RpcException && ((RpcException) t).isTimeout());
    }

    /**
     * The call's own future was cancelled (by the user, through the future Dubbo keeps for 2.6.x
     * code, {@code FutureContext.getCompatibleCompletableFuture()}): the callback gets the
     * CancellationException, or a CompletionException around it; over Triple, the status
     * CANCELLED, which Dubbo gives the generic code UNKNOWN_EXCEPTION (so only the status tells).
     * Or the call was never sent ({@link #isNeverSent}, {@link #isUnencodable}), or the caller
     * gave it up by an interrupt ({@link #isInterrupted}).
     */
    static boolean isCancellation(Throwable t) {
        boolean interrupted = isInterrupted(t);
        t = unwrap(t);
        return interrupted || t instanceof CancellationException || TripleStatuses.isCancelled(t)
                || isNeverSent(t) || isUnencodable(t);
    }

    /**
     * The calling thread was interrupted while it waited for a sync call's answer (a
     * {@code Future.cancel(true)} on the task making the call, an executor shut down now):
     * Dubbo's AbstractInvoker throws an RpcException of the generic code around the
     * InterruptedException, and a failover retries on the other providers, each attempt failing
     * at once since the thread stays interrupted. The caller gave the calls up: no verdict on
     * the providers, which all answered (as {@code io.polylb.Balancer.call} books an interrupt).
     * As failures, one cancelled task put a failure on every provider a failover tried.
     */
    static boolean isInterrupted(Throwable t) {
        for (int depth = 0; t != null && depth < 64; depth++, t = t.getCause()) {
            if (t instanceof InterruptedException) {
                return true;
            }
        }
        return false;
    }

    /**
     * Dubbo could not encode the request, so never sent it, and the provider's service code never
     * saw it: no verdict on the provider (docs/outcomes.md), whose every other call may be fine. As
     * failures, one caller's bad argument (a class that is not Serializable, or outside Dubbo's
     * serialization allow list, STRICT from Dubbo 3.3), retried by a failover on every provider,
     * would eject them all. Over the dubbo protocol the request is encoded in the calling thread
     * (NettyChannel.send, unless {@code encode.in.io} is true) and DubboInvoker throws an
     * RpcException around the RemotingException of that send: SERIALIZATION_EXCEPTION when the
     * serializer failed (DubboInvoker's own test), or around an ExceedPayloadLimitException for a
     * request over this side's {@code payload} limit. (An error the provider answered comes in the
     * call's future instead, wrapped in an ExecutionException: not these.) Over Triple, the status
     * Triple gives its own refusal to send ({@link TripleStatuses#isUnsentRequest}).
     *
     * <p>A provider that could not deserialize the request, or serialize its answer, stays a
     * failure (over the dubbo protocol a RemotingException with its text, "Fail to decode request"
     * or "Failed to send response"; over Triple UNKNOWN). Another provider running the same code
     * would fail the same way, but the consumer cannot tell that from a provider that could not
     * serve (UNKNOWN is any uncaught server error), and such a failure usually comes from a provider
     * that differs from the rest (a rollout where its answer's class lost Serializable, or is not on
     * its allow list): steering away from it is then right, and where every provider fails alike,
     * {@code outlier.maxEjectionPercent} bounds the ejections.
     */
    static boolean isUnencodable(Throwable t) {
        if (t instanceof RpcException && t.getCause() instanceof RemotingException) {
            return ((RpcException) t).isSerialization()
                    || t.getCause().getCause() instanceof ExceedPayloadLimitException;
        }
        return TripleStatuses.isUnsentRequest(t);
    }

    /**
     * Dubbo did not send the call: the deadline propagated from an upstream call ({@code
     * timeout-countdown}) was spent before this attempt, typically by a failover's earlier attempt
     * (DubboInvoker and TripleInvoker complete the result normally with an RpcException of code
     * TIMEOUT_TERMINATE). Counted as a success, as Dubbo's ActiveLimitFilter counts it, it would
     * be a 0-µs answer the provider never gave; as a timeout, a verdict on a provider never asked.
     */
    static boolean isNeverSent(Throwable t) {
        return t instanceof RpcException && ((RpcException) t).getCode() == RpcException.TIMEOUT_TERMINATE;
    }

    private static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    private static Selections.Selection finish(Invoker<?> invoker, Invocation invocation) {
        Selections selections = Selections.current(invocation);
        return selections == null ? null : selections.finish(invoker.getUrl());
    }

    private static long elapsedUs(Selections.Selection s) {
        return Math.max(0, (System.nanoTime() - s.startNanos) / 1000);
    }

    /** Reports an error outcome; a cancel says nothing of the provider and carries no latency. */
    private static void report(Selections.Selection s, Outcome outcome) {
        report(s, outcome == Outcome.CANCELLED ? 0 : elapsedUs(s), outcome);
    }

    private static void report(Selections.Selection s, long elapsedUs, Outcome outcome) {
        try {
            s.balancer.report(s.method, s.id, elapsedUs, outcome);
        } catch (RuntimeException ignored) {
            // The balancer was closed during shutdown; nothing to account for any more.
        }
    }
}
