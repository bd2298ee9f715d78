package io.polylb.spring;

import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;

/**
 * What ends a request's count when its exchange is cancelled, for the callers that put one in the
 * request's {@code RequestData} attributes (Spring Cloud Gateway's exchange attributes, by
 * {@link PolylbGatewayConfiguration}): Spring calls no lifecycle method for a cancelled
 * exchange, so without it a client that disconnects mid-proxy stays counted in flight until its
 * lease times out.
 */
final class CancelHooks {
    static final String ATTRIBUTE = CancelHooks.class.getName();

    private final Queue<Runnable> hooks = new ConcurrentLinkedQueue<>();

    void add(Runnable hook) {
        hooks.add(hook);
    }

    /** Runs every hook once; ending a request already completed does nothing. */
    void cancelled() {
        for (Runnable hook; (hook = hooks.poll()) != null; ) {
            hook.run();
        }
    }
}
