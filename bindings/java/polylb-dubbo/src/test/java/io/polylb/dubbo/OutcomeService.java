package io.polylb.dubbo;

import com.google.protobuf.Int32Value;
import java.util.concurrent.CompletableFuture;

/** The service the Triple outcome test's providers export. */
public interface OutcomeService {
    /** The provider's name after {@code delayMs}; a plain method, called async or sync. */
    String later(String callId, int delayMs);

    /** The same, declared async: Dubbo returns the call's future to the caller. */
    CompletableFuture<String> laterFuture(String callId, int delayMs);

    /** Throws an IllegalArgumentException: the provider's business exception, its answer. */
    String fail(String callId);

    /**
     * Throws the gRPC status whose code is {@code code} (-1: an uncaught IllegalStateException).
     * Protobuf-typed, so Triple sends the call unwrapped, as gRPC does, and what the method throws
     * reaches the consumer as the call's status (grpc-status), not as a serialized exception.
     */
    Int32Value answerStatus(Int32Value code);
}
