package io.polylb.dubbo;

import java.util.Set;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.remoting.Constants;
import org.apache.dubbo.rpc.AppResponse;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.StatusRpcException;
import org.apache.dubbo.rpc.TriRpcStatus;

/**
 * How a call over Dubbo's Triple protocol ended. Triple completes a unary call's future normally
 * whatever the call's gRPC status: its DeadlineFuture (on timeout or on a cancel) and its
 * UnaryClientCallListener (on any status but OK) put the status, as a {@link StatusRpcException},
 * in the response's exception slot.
 *
 * <p>An outcome is a verdict on the provider (docs/outcomes.md), so the status's code decides.
 * An error of the service's own ({@code INVALID_ARGUMENT}, {@code NOT_FOUND}, {@code
 * ALREADY_EXISTS}, {@code PERMISSION_DENIED}, {@code UNAUTHENTICATED}, {@code
 * FAILED_PRECONDITION}, {@code ABORTED}, {@code OUT_OF_RANGE}) is the provider's answer, as a
 * business exception is: another provider would have answered the same, and counted as failures
 * such errors from one bad client would eject good providers. Every other code says the attempt
 * failed: {@code DEADLINE_EXCEEDED} a timeout, {@code CANCELLED} a cancel, the rest ({@code
 * UNAVAILABLE}, {@code RESOURCE_EXHAUSTED}, {@code UNIMPLEMENTED}, {@code INTERNAL}, {@code
 * UNKNOWN}, {@code DATA_LOSS}) a provider that could not serve.
 *
 * <p>{@code CANCELLED} is a cancel only when the consumer cancelled the call: a user's cancel of
 * the call's own future (DeadlineFuture.cancel, which completes it with a response of its own).
 * Triple gives the same code to a call whose stream ended under it: the connection to the provider
 * closed (TripleClientCall.onClose: onCancelByRemote(CANCELLED)), the server reset the stream
 * ({@code RST_STREAM}: "Canceled by remote peer, errorCode=N"), the connection failed
 * (exceptionCaught, reported as a reset with errorCode 2), and to a CANCELLED the provider sent
 * as the call's grpc-status. None of those is the consumer's doing: the provider could not serve,
 * a failure. Such a status reaches a unary call through its UnaryClientCallListener, whose
 * response, unlike DeadlineFuture's, carries the attribute {@code content-length} (Dubbo 3.2 and
 * later): {@link #isCancelledUnderTheCall} tells them apart by it. Dubbo 3.0 and 3.1 set no such
 * mark, and every CANCELLED stays a cancel there. The descriptions are no mark: the closed
 * connection's CANCELLED has none, as the user's cancel has none.
 *
 * <p>A provider's status reaches the consumer as the call's status when Triple sends the method
 * unwrapped (an IDL stub, or protobuf-typed request and response: GrpcHttp2ServerTransportListener
 * .needWrap): what the method throws becomes grpc-status (CompositeExceptionHandler
 * .resolveGrpcStatus), a StatusRpcException its own code, any other uncaught exception
 * {@code UNKNOWN}. A wrapped method (plain Java types) sends what it throws as the exception
 * itself with status OK (ExceptionCustomizerWrapper.customizeGrpc); a StatusRpcException it
 * throws fails Dubbo's default serialization check (TriRpcStatus is not on its allow list), and
 * the call ends {@code UNKNOWN} instead.
 *
 * <p>StatusRpcException is in the optional {@code dubbo-rpc-triple} module of modular Dubbo
 * (3.2+): the Triple classes are resolved only for an exception whose class has that name, i.e.
 * when Triple is there. The codes are compared by name for the same reason.
 */
final class TripleStatuses {
    /** The protocols Dubbo 3.3 runs over Triple's client (TripleProtocol, GrpcProtocol). */
    private static final Set<String> TRIPLE_PROTOCOLS = Set.of("tri", "grpc");
    private static final String STATUS_EXCEPTION = "org.apache.dubbo.rpc.StatusRpcException";
    /** The codes of a provider's answer: OK, and the errors of the service's own. */
    private static final Set<String> ANSWERS = Set.of("OK", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS",
            "PERMISSION_DENIED", "UNAUTHENTICATED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE");

    /** Triple's descriptions of a request it did not send (see {@link #isUnsentRequest}). */
    private static final Set<String> UNSENT = Set.of("Serialize request failed", "Call aborted cause client exception");

    private TripleStatuses() {}

    /**
     * The response's exception is Triple's status of the call and says the attempt failed (a
     * timeout, a cancel, a provider that could not serve), not that the provider answered. Over
     * another protocol (dubbo) such an exception is what the provider threw, e.g. from its own
     * Triple call: its answer.
     */
    static boolean isErrorStatus(Throwable exception, URL providerUrl) {
        if (exception == null || providerUrl == null || !TRIPLE_PROTOCOLS.contains(providerUrl.getProtocol())
                || !isStatusException(exception)) {
            return false;
        }
        String code = codeName(exception);
        // Another class loader's status cannot be read: counted as an error.
        return code == null || !ANSWERS.contains(code);
    }

    /**
     * {@code t} is Triple's status of a call that the provider answered: OK, or an error of the
     * service's own. Any other exception is not.
     */
    static boolean isAnswer(Throwable t) {
        String code = codeName(t);
        return code != null && ANSWERS.contains(code);
    }

    /**
     * Triple's status CANCELLED: the consumer's cancel, unless the call's stream ended under it
     * (see {@link #isCancelledUnderTheCall}, and TripleStreams for streams).
     */
    static boolean isCancelled(Throwable t) {
        return "CANCELLED".equals(codeName(t));
    }

    /**
     * {@code response}, a unary Triple call's, holds the status CANCELLED that Triple's call
     * listener built from the call's end (a closed connection, a reset stream, the provider's own
     * status): not a consumer's cancel, which completes the call with a response of
     * DeadlineFuture's, without the listener's {@code content-length} attribute. False when
     * unsure (a Dubbo without the mark, another class loader's response).
     */
    static boolean isCancelledUnderTheCall(Result response) {
        if (!(response instanceof AppResponse) || !isCancelled(response.getException())) {
            return false;
        }
        try {
            return ((AppResponse) response).getAttribute(Constants.CONTENT_LENGTH_KEY) != null;
        } catch (LinkageError e) {
            return false; // a Dubbo unlike the one the adapter was built for: a cancel, as before
        }
    }

    /**
     * {@code t}, or an exception in its causes (a sync call throws the status in an RpcException
     * around an ExecutionException), is Triple's own refusal to send the request: INTERNAL with a
     * cause, which only a status made on this side has (one read from the wire has none), and
     * Triple's text for a request it could not pack ("Serialize request failed",
     * TripleClientCall.sendMessage) or for a call that threw while this thread started and sent it
     * ("Call aborted cause client exception", TripleInvoker.doInvoke: also what a request that
     * could not be packed ends with when the cancel that follows races the stream's creation).
     * The texts are all Triple gives to go by. Only for an exception of this side's call: a
     * provider's answer over the dubbo protocol may carry such a status of its own call.
     */
    static boolean isUnsentRequest(Throwable t) {
        for (int depth = 0; t != null && depth < 8; t = t.getCause() == t ? null : t.getCause(), depth++) {
            if (!isStatusException(t)) {
                continue;
            }
            try {
                TriRpcStatus status = ((StatusRpcException) t).getStatus();
                return status != null && status.code != null && "INTERNAL".equals(status.code.name())
                        && status.cause != null && status.description != null && UNSENT.contains(status.description);
            } catch (LinkageError | ClassCastException e) {
                return false; // another class loader's Triple: not ours to read
            }
        }
        return false;
    }

    /** The name of the code of Triple's status {@code t}; null for any other exception. */
    private static String codeName(Throwable t) {
        if (!isStatusException(t)) {
            return null;
        }
        try {
            TriRpcStatus status = ((StatusRpcException) t).getStatus();
            return status == null || status.code == null ? null : status.code.name();
        } catch (LinkageError | ClassCastException e) {
            // Another class loader's Triple: not ours to read.
            return null;
        }
    }

    private static boolean isStatusException(Throwable t) {
        for (Class<?> c = t == null ? null : t.getClass(); c != null; c = c.getSuperclass()) {
            if (c.getName().equals(STATUS_EXCEPTION)) {
                return true;
            }
        }
        return false;
    }
}
