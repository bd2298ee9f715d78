package io.polylb.grpc;

import io.grpc.ClientStreamTracer;
import io.grpc.Context;
import io.grpc.Metadata;
import io.polylb.Outcome;
import java.lang.ref.Cleaner;
import java.util.concurrent.atomic.LongAdder;

/**
 * The tracer factory of one pick: gRPC calls it when it opens the stream on the picked
 * subchannel, and the stream's tracer then reports the call when it closes.
 *
 * <p>A backstop for the picks gRPC drops without a word, neither opening a stream nor closing
 * one: a queued call cancelled while gRPC was picking for it ({@code DelayedClientTransport}
 * makes its stream, finds the call cancelled, never starts it), and a retry attempt whose call
 * ended during the backoff. Once this factory is unreachable (the tracer holds it) and the pick
 * is still unreported, the pick is reported cancelled. The garbage collector decides when, and
 * the backstop costs a phantom reference per pick, so only those picks get it (see {@link
 * PolylbPicker#publishing}). The endpoint's sweep
 * handles the common drop, a pick whose connection closed, promptly (see {@link Endpoint}).
 */
final class PickTracerFactory extends ClientStreamTracer.Factory {
    private static final Cleaner CLEANER = Cleaner.create();
    /** Picks given the backstop (read by the tests, to see which picks get it). */
    static final LongAdder BACKSTOPS = new LongAdder();
    private static final ClientStreamTracer NO_REPORT = new ClientStreamTracer() {};

    private final Pick pick;

    /** @param mayGoUnstarted a pick for a queued call or a retry attempt: only those get the backstop */
    PickTracerFactory(Pick pick, boolean mayGoUnstarted) {
        this.pick = pick;
        if (mayGoUnstarted) {
            CLEANER.register(this, () -> pick.finish(Outcome.CANCELLED));
            BACKSTOPS.increment();
        }
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
