package io.polylb.dubbo;

import java.util.Set;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.StatusRpcException;
import org.apache.dubbo.rpc.TriRpcStatus;

/**
 * How a call over Dubbo's Triple protocol ended. Triple completes a unary call's future normally
 * even when the call did not get an answer: its DeadlineFuture (on timeout or on a cancel) and its
 * UnaryClientCallListener (on any status but OK) put the call's gRPC status, as a
 * {@link StatusRpcException}, in the response's exception slot. A provider's business exception
 * comes back with status OK, as the exception itself (never a StatusRpcException).
 *
 * <p>StatusRpcException is in the optional {@code dubbo-rpc-triple} module of modular Dubbo
 * (3.2+): the Triple classes are resolved only for an exception whose class has that name, i.e.
 * when Triple is there.
 */
final class TripleStatuses {
    /** The protocols Dubbo 3.3 runs over Triple's client (TripleProtocol, GrpcProtocol). */
    private static final Set<String> TRIPLE_PROTOCOLS = Set.of("tri", "grpc");
    private static final String STATUS_EXCEPTION = "org.apache.dubbo.rpc.StatusRpcException";

    private TripleStatuses() {}

    /**
     * The response's exception is Triple's status of the call (a call over Triple that ended
     * without an answer), not an answer of the provider's. Over another protocol (dubbo) such an
     * exception is what the provider threw, e.g. from its own Triple call: its answer.
     */
    static boolean isCallStatus(Throwable exception, URL providerUrl) {
        return exception != null && providerUrl != null && TRIPLE_PROTOCOLS.contains(providerUrl.getProtocol())
                && isStatusException(exception);
    }

    /** The call was cancelled on the consumer's side: Triple's status CANCELLED. */
    static boolean isCancelled(Throwable t) {
        if (!isStatusException(t)) {
            return false;
        }
        try {
            TriRpcStatus status = ((StatusRpcException) t).getStatus();
            return status != null && status.code == TriRpcStatus.Code.CANCELLED;
        } catch (LinkageError | ClassCastException e) {
            // Another class loader's Triple: not ours to read.
            return false;
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
