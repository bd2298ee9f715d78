package io.polylb.grpc;

import io.polylb.Outcome;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One select of the library, ended by exactly one report whatever gRPC does with the pick: the
 * stream's end, or a cancel when gRPC discarded the pick or never opened its stream.
 */
final class Pick {
    private static final int PICKED = 0; // returned to gRPC, no stream tracer yet
    private static final int STREAMING = 1; // gRPC created the stream's tracer
    private static final int REPORTED = 2;

    private final BalancerState state;
    private final int method;
    private final long id;
    private final Endpoint endpoint;
    private final long startNanos = System.nanoTime();
    private final AtomicInteger phase = new AtomicInteger(PICKED);

    Pick(BalancerState state, int method, long id, Endpoint endpoint) {
        this.state = state;
        this.method = method;
        this.id = id;
        this.endpoint = endpoint;
    }

    /** gRPC is opening a stream for this pick: from now on the stream's end reports it. */
    boolean startStream() {
        if (!phase.compareAndSet(PICKED, STREAMING)) {
            return false; // already cancelled: the endpoint left READY meanwhile
        }
        endpoint.release(this);
        return true;
    }

    /** Cancels the pick if gRPC never took it up (no stream tracer): the endpoint's sweep. */
    boolean cancelIfUnused() {
        if (phase.compareAndSet(PICKED, REPORTED)) {
            send(Outcome.CANCELLED, 0, 0);
            return true;
        }
        return false;
    }

    /** Reports the call's end with its latency since the pick, unless already reported. */
    void finish(Outcome outcome) {
        finish(outcome, 0);
    }

    /**
     * As {@link #finish(Outcome)}, with the CPU utilization the provider reported for the call
     * (ORCA; 0 for none), which feeds {@code adaptive} as Dubbo's provider metrics do: CPU in
     * percent, the consumer's clock standing for the provider's (reports arrive in order), the
     * round trip measured here. Other strategies ignore it.
     */
    void finish(Outcome outcome, double cpuUtilization) {
        if (phase.getAndSet(REPORTED) != REPORTED) {
            send(outcome, (System.nanoTime() - startNanos) / 1000, cpuUtilization);
        }
    }

    private void send(Outcome outcome, long elapsedUs, double cpuUtilization) {
        try {
            if (cpuUtilization > 0) {
                state.balancer.reportProviderMetrics(method, id, System.currentTimeMillis(),
                        100 * cpuUtilization, elapsedUs, 0);
            }
            state.balancer.report(method, id, outcome == Outcome.CANCELLED ? 0 : elapsedUs, outcome);
        } catch (RuntimeException closedOrGone) {
            // The balancer was replaced by a config change, or the channel shut down: the
            // report has nowhere to go and nothing to undo.
        }
    }
}
