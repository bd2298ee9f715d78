package io.polylb.grpc;

import io.grpc.ClientStreamTracer;
import io.grpc.Context;
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
    /** Whether the stream reached the wire: its headers went out, or the server answered. */
    private volatile boolean sent;

    CallTracer(PickTracerFactory factory, Pick pick, Context context) {
        this.factory = factory;
        this.pick = pick;
        this.context = context;
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
    }

    @Override
    public void streamClosed(Status status) {
        // A stream that never reached the provider (its transport was closing, or it could
        // not be opened) says nothing about it: only the in-flight count is undone. Read as a
        // success of a few microseconds, a closing connection would look like the fastest
        // provider to peakewma.
        pick.finish(sent ? Outcomes.of(status, context.isCancelled()) : Outcome.CANCELLED);
    }
}
