package io.polylb.grpc;

import io.grpc.ClientStreamTracer;
import io.grpc.Context;
import io.grpc.Metadata;
import io.polylb.Outcome;
import java.lang.ref.Cleaner;

/**
 * The tracer factory of one pick: gRPC calls it when it opens the stream on the picked
 * subchannel, and the stream's tracer then reports the call when it closes.
 *
 * <p>A backstop for the picks gRPC drops without a word, neither opening a stream nor closing
 * one (a call cancelled while gRPC was picking for it: its stream is created, never started):
 * once this factory is unreachable (the tracer holds it) and the pick is still unreported, the
 * pick is reported cancelled. The endpoint's sweep handles the common case promptly (see
 * {@link Endpoint}); this one waits for the garbage collector.
 */
final class PickTracerFactory extends ClientStreamTracer.Factory {
    private static final Cleaner CLEANER = Cleaner.create();
    private static final ClientStreamTracer NO_REPORT = new ClientStreamTracer() {};

    private final Pick pick;

    PickTracerFactory(Pick pick) {
        this.pick = pick;
        CLEANER.register(this, () -> pick.finish(Outcome.CANCELLED));
    }

    @Override
    public ClientStreamTracer newClientStreamTracer(ClientStreamTracer.StreamInfo info, Metadata headers) {
        if (!pick.startStream()) {
            return NO_REPORT; // the pick was already reported cancelled
        }
        // gRPC opens the stream in the call's Context: it tells the call's own cancel.
        return new CallTracer(this, pick, Context.current(), info);
    }
}
