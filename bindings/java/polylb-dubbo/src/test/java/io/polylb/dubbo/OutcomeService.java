package io.polylb.dubbo;

import java.util.concurrent.CompletableFuture;
import org.apache.dubbo.common.stream.StreamObserver;

/** The service the Triple outcome test's providers export. */
public interface OutcomeService {
    /** The provider's name after {@code delayMs}; a plain method, called async or sync. */
    String later(String callId, int delayMs);

    /** The same, declared async: Dubbo returns the call's future to the caller. */
    CompletableFuture<String> laterFuture(String callId, int delayMs);

    /** Throws an IllegalArgumentException: the provider's business exception, its answer. */
    String fail(String callId);

    /** A server stream (Triple only): the provider's name every 100 ms, for 3 s. */
    void stream(String callId, StreamObserver<String> messages);
}
