package io.polylb.grpc;

import io.polylb.Outcome;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * One select of the library, ended by exactly one report whatever gRPC does with the pick: the
 * stream's end, or a cancel when gRPC discarded the pick or never opened its stream.
 */
final class Pick {
    private static final int PICKED = 0; // returned to gRPC, no stream tracer yet
    private static final int STREAMING = 1; // gRPC created the stream's tracer
    private static final int REPORTED = 2;
    private static final VarHandle PHASE;

    static {
        try {
            PHASE = MethodHandles.lookup().findVarHandle(Pick.class, "phase", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final BalancerState state;
    private final int method;
    private final long id;
    private final Endpoint endpoint;
    private final long startNanos = System.nanoTime();
    @SuppressWarnings("unused") // through PHASE: one object less per call than an AtomicInteger
    private volatile int phase = PICKED;

    Pick(BalancerState state, int method, long id, Endpoint endpoint) {
        this.state = state;
        this.method = method;
        this.id = id;
        this.endpoint = endpoint;
    }

    /**
     * A pick is its own key in its endpoint's set (equals is identity); a hash from its fields
     * spares the object the identity hash, which the JVM computes and stores on first use.
     */
    @Override
    public int hashCode() {
        return Long.hashCode(startNanos * 0x9E3779B97F4A7C15L + id);
    }

    @Override
    public boolean equals(Object other) {
        return this == other;
    }

    /** gRPC is opening a stream for this pick: from now on the stream's end reports it. */
    boolean startStream() {
        if (!PHASE.compareAndSet(this, PICKED, STREAMING)) {
            return false; // already cancelled: the endpoint left READY meanwhile
        }
        endpoint.release(this);
        return true;
    }

    /** Cancels the pick if gRPC never took it up (no stream tracer): the endpoint's sweep. */
    boolean cancelIfUnused() {
        if (PHASE.compareAndSet(this, PICKED, REPORTED)) {
            send(Outcome.CANCELLED, 0, OrcaReport.Load.NONE);
            return true;
        }
        return false;
    }

    /** Reports the call's end with its latency since the pick, unless already reported. */
    void finish(Outcome outcome) {
        finish(outcome, OrcaReport.Load.NONE);
    }

    /**
     * As {@link #finish(Outcome)}, with the provider's ORCA load report for the call
     * ({@link OrcaReport.Load#NONE} for none). Its CPU utilization feeds {@code adaptive} as
     * Dubbo's provider metrics do: CPU in percent, the consumer's clock standing for the
     * provider's (reports arrive in order), the round trip measured here. Its qps, eps and
     * utilization feed {@code orca} (gRFC A58's per-call reports), unless its out-of-band reports
     * do ({@link OrcaOob}). Other strategies ignore both.
     */
    void finish(Outcome outcome, OrcaReport.Load load) {
        if ((int) PHASE.getAndSet(this, REPORTED) != REPORTED) {
            send(outcome, (System.nanoTime() - startNanos) / 1000, load);
        }
    }

    private void send(Outcome outcome, long elapsedUs, OrcaReport.Load load) {
        if (load.cpuUtilization() > 0) {
            try {
                state.balancer.reportProviderMetrics(method, id, System.currentTimeMillis(),
                        100 * load.cpuUtilization(), elapsedUs, 0);
            } catch (RuntimeException refusedOrGone) {
                // A load the library refuses (beyond a double as a percentage) or a balancer
                // gone: the call's own report below must still end its in-flight count.
            }
        }
        if (load.hasCapacity() && state.callLoadReports) {
            try {
                state.balancer.reportLoad(id, load.qps(), load.eps(), load.utilization());
            } catch (RuntimeException refusedOrGone) {
                // eps above qps (the library refuses the report, as gRPC's weight would be
                // meaningless), or a balancer gone: as above.
            }
        }
        try {
            state.balancer.report(method, id, outcome == Outcome.CANCELLED ? 0 : elapsedUs, outcome);
        } catch (RuntimeException closedOrGone) {
            // The balancer was replaced by a config change, or the channel shut down: the
            // report has nowhere to go and nothing to undo.
        }
    }
}
