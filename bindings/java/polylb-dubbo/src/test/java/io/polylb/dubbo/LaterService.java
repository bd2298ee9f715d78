package io.polylb.dubbo;

import java.util.concurrent.CompletableFuture;

/** The service the cancel test's providers export: answers, successfully, after a delay. */
public interface LaterService {
    /** The provider's name after {@code delayMs}; a plain method, called async or sync. */
    String later(String callId, int delayMs);

    /** The same, declared async: Dubbo returns the call's future to the caller. */
    CompletableFuture<String> laterFuture(String callId, int delayMs);
}
