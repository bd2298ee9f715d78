package io.polylb.grpc;

import io.grpc.LoadBalancer.PickResult;
import io.grpc.LoadBalancer.PickSubchannelArgs;
import io.grpc.LoadBalancer.SubchannelPicker;
import io.grpc.Metadata;
import io.grpc.Status;
import io.polylb.Outcome;
import io.polylb.PolylbException;
import java.util.Map;

/**
 * Places calls over the READY endpoints: the library picks the invoker among its set but the
 * endpoints not READY, gRPC the invoker's subchannel.
 */
final class PolylbPicker extends SubchannelPicker {
    /**
     * The header gRPC puts on every retry and hedging attempt after the first. gRPC picks for a
     * retry when it decides to retry and starts the stream only after the backoff; a call that
     * ends meanwhile (its cancel, its deadline, the channel's shutdownNow) never starts it
     * ({@code RetriableStream.commit} cancels the scheduled start), so its tracer is neither
     * started nor closed.
     */
    private static final Metadata.Key<String> PREVIOUS_ATTEMPTS =
            Metadata.Key.of("grpc-previous-rpc-attempts", Metadata.ASCII_STRING_MARSHALLER);

    private final BalancerState state;
    // The READY endpoints by invoker id, an open-addressing table (at most half full, so every
    // probe ends at an empty slot). Not a Map<Long, Endpoint>: ids count up over the channel's
    // life, and looking one above 127 up boxed it, 24 B on every pick. The policy's ids are
    // consecutive, so their low bits spread them without a hash.
    private final long[] slotIds;
    private final Endpoint[] slotEndpoints;
    private final int ready;
    private final long[] notReady; // the set's other ids; usually none
    /** The thread handing this picker to gRPC, while it does; see {@link #publishing}. */
    private volatile Thread publisher;

    PolylbPicker(BalancerState state, Map<Long, Endpoint> endpoints) {
        this(state, endpoints, new long[0]);
    }

    PolylbPicker(BalancerState state, Map<Long, Endpoint> endpoints, long[] notReady) {
        this.state = state;
        int capacity = 1;
        while (capacity < 2 * endpoints.size()) {
            capacity <<= 1;
        }
        this.slotIds = new long[capacity];
        this.slotEndpoints = new Endpoint[capacity];
        for (Map.Entry<Long, Endpoint> entry : endpoints.entrySet()) {
            long id = entry.getKey();
            int slot = (int) id & (capacity - 1);
            while (slotEndpoints[slot] != null) {
                slot = (slot + 1) & (capacity - 1);
            }
            slotIds[slot] = id;
            slotEndpoints[slot] = entry.getValue();
        }
        this.ready = endpoints.size();
        this.notReady = notReady;
    }

    private Endpoint endpoint(long id) {
        int mask = slotIds.length - 1;
        for (int slot = (int) id & mask; ; slot = (slot + 1) & mask) {
            Endpoint endpoint = slotEndpoints[slot];
            if (endpoint == null || slotIds[slot] == id) {
                return endpoint;
            }
        }
    }

    /** The READY endpoints this picker places calls on (read by the tests). */
    int readyEndpoints() {
        return ready;
    }

    /**
     * Hands this picker to gRPC ({@code helper.updateBalancingState}). gRPC picks for the calls
     * it queued (no picker had a connection for them) inside that call, on this thread
     * ({@code DelayedClientTransport.reprocess}), and only those picks can be dropped after
     * their stream tracer was made: a queued call cancelled meanwhile keeps its stream unstarted.
     * Picks made while publishing get the garbage collector's backstop ({@link
     * PickTracerFactory}), as do retry attempts (see {@link #PREVIOUS_ATTEMPTS}); a call's first
     * attempt picked on its own thread always starts its stream, which always closes, so its
     * pick does without one.
     */
    void publishing(Runnable update) {
        publisher = Thread.currentThread();
        try {
            update.run();
        } finally {
            publisher = null;
        }
    }

    @Override
    public PickResult pickSubchannel(PickSubchannelArgs args) {
        int method;
        long id;
        try {
            method = state.method(args.getMethodDescriptor().getFullMethodName());
            byte[] key = args.getCallOptions().getOption(PolylbGrpc.HASH_KEY);
            id = notReady.length == 0 ? state.balancer.select(method, key)
                    : state.balancer.selectAmong(method, key, null, notReady);
        } catch (IllegalStateException closed) {
            // A picker of a balancer a config change replaced, still in gRPC's hands for a
            // moment: the call waits for the new picker, already on its way.
            return PickResult.withNoResult();
        } catch (PolylbException e) {
            if (e.status() == io.polylb.Status.NO_CANDIDATE || e.status() == io.polylb.Status.NO_PROVIDER) {
                // The library took another set an instant before gRPC got the picker over it:
                // wait for that picker.
                return PickResult.withNoResult();
            }
            return PickResult.withError(Status.UNAVAILABLE.withDescription("polylb: " + e.getMessage()));
        }
        Endpoint endpoint = endpoint(id);
        if (endpoint == null) {
            // The library took a new set an instant before gRPC got the picker over it (the
            // two cannot change in one step): undo the select, pick again with the new picker.
            cancel(method, id);
            return PickResult.withNoResult();
        }
        Pick pick = new Pick(state, method, id, endpoint);
        if (!endpoint.hold(pick)) {
            // Its connection is gone (a new picker without it is on its way): pick again then.
            pick.cancelIfUnused();
            return PickResult.withNoResult();
        }
        boolean mayGoUnstarted = publisher == Thread.currentThread()
                || args.getHeaders().containsKey(PREVIOUS_ATTEMPTS);
        return PickResult.withSubchannel(endpoint.subchannel, new PickTracerFactory(pick, mayGoUnstarted));
    }

    private void cancel(int method, long id) {
        try {
            state.balancer.report(method, id, 0, Outcome.CANCELLED);
        } catch (RuntimeException closed) {
            // replaced meanwhile: nothing to undo
        }
    }
}
