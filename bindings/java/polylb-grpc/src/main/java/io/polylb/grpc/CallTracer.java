package io.polylb.grpc;

import io.grpc.ClientStreamTracer;
import io.grpc.Context;
import io.grpc.Deadline;
import io.grpc.Metadata;
import io.grpc.Status;
import io.polylb.Outcome;

/**
 * Reports one stream (a unary call, or a whole streaming call) when it closes: its latency since
 * the pick and its outcome read from the status.
 */
final class CallTracer extends ClientStreamTracer {
    @SuppressWarnings("unused") // keeps the factory, and so its cleaner, alive with the stream
    private final PickTracerFactory factory;
    private final Pick pick;
    private final Context context;
    /** The call's deadline (its own or its Context's, the earlier), or null. */
    private final Deadline deadline;
    /** Whether the stream reached the wire: its headers went out, or the server answered. */
    private volatile boolean sent;
    /** Whether the provider ended the stream with a status of its own. */
    private volatile boolean trailersReceived;
    /** The provider's ORCA load report for the call, or {@link OrcaReport.Load#NONE}. */
    private volatile OrcaReport.Load load = OrcaReport.Load.NONE;

    CallTracer(PickTracerFactory factory, Pick pick, Context context, StreamInfo info) {
        this.factory = factory;
        this.pick = pick;
        this.context = context;
        this.deadline = earlier(info.getCallOptions().getDeadline(), context.getDeadline());
    }

    private static Deadline earlier(Deadline a, Deadline b) {
        return a == null ? b : b == null ? a : a.minimum(b);
    }

    @Override
    public void outboundHeaders() {
        sent = true;
    }

    @Override
    public void inboundHeaders(Metadata headers) {
        sent = true;
    }

    @Override
    public void inboundTrailers(Metadata trailers) {
        sent = true;
        trailersReceived = true;
        load = OrcaReport.load(trailers);
    }

    @Override
    public void streamClosed(Status status) {
        // A stream that never reached the provider (its transport was closing, or it could
        // not be opened) says nothing about it: only the in-flight count is undone. Read as a
        // success of a few microseconds, a closing connection would look like the fastest
        // provider to peakewma.
        if (!sent) {
            pick.finish(Outcome.CANCELLED);
        } else if (status.getCode() == Status.Code.CANCELLED && deadline != null && deadline.isExpired()) {
            // With retries on (gRPC's default) the call's deadline ends the attempt's stream with
            // CANCELLED ("thrown away because RetriableStream committed"), not DEADLINE_EXCEEDED.
            pick.finish(Outcome.TIMEOUT, load);
        } else {
            boolean ownCancel = context.isCancelled()
                    || (status.getCode() == Status.Code.CANCELLED && !endedByProvider(status));
            pick.finish(Outcomes.of(status, ownCancel), load);
        }
    }

    /**
     * Whether a CANCELLED came from the provider: a status in its trailers, or its RST_STREAM
     * (worded so by the Netty and the OkHttp transports). gRPC gives the tracer no other sign of
     * where a cancel came from, and every other CANCELLED on a stream that reached the wire is
     * this side's: {@code ClientCall.cancel} (a future's {@code cancel}, an async stub's
     * {@code ClientCallStreamObserver.cancel}, an interrupted blocking call) with its own message,
     * or with retries on the attempt's "Stream thrown away because RetriableStream committed"
     * (also the loser of a hedged pair, or "Unneeded hedging": gRPC does not tell the policy's
     * tracer whether an attempt is hedged, its {@code StreamInfo} carries only call options).
     * Read as a failure, a client that cancels its slower calls would eject healthy providers.
     */
    private boolean endedByProvider(Status status) {
        if (trailersReceived) {
            return true;
        }
        String description = status.getDescription();
        return description != null && (description.startsWith("RST_STREAM") || description.contains("Rst Stream"));
    }
}
