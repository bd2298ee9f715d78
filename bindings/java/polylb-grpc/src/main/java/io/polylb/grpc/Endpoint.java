package io.polylb.grpc;

import io.grpc.ConnectivityState;
import io.grpc.ConnectivityStateInfo;
import io.grpc.EquivalentAddressGroup;
import io.grpc.LoadBalancer.Subchannel;
import io.grpc.Status;
import io.polylb.Invoker;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * One endpoint of the resolver (an {@link EquivalentAddressGroup}): one subchannel, one invoker
 * id for as long as the resolver lists it (also across reconnects, so its state survives them).
 *
 * <p>It also holds the picks gRPC has not yet opened a stream for. gRPC drops a pick silently
 * when the picked subchannel has no connection any more (its transport closed an instant before:
 * {@code GrpcUtil.getTransportFromPickResult} returns null, no tracer is created, the call waits
 * for the next picker). That only happens once the subchannel's transport is gone, and gRPC then
 * tells the policy the subchannel left READY; so on leaving READY (or the resolver's list) the
 * endpoint reports every pick still unopened as cancelled. Picks that gRPC did open were taken
 * out of the set when their tracer was created, in the same thread, right after the pick.
 */
final class Endpoint {
    /** Picks gRPC dropped, cancelled by a sweep (read by the tests, to see the path taken). */
    static final LongAdder DROPPED_PICKS = new LongAdder();

    final long id;
    final Subchannel subchannel;
    private Invoker fields;
    /** The resolver's addresses, in its order (the order the subchannel tries them in). */
    private List<SocketAddress> addresses;
    /** Written in the synchronization context, read by pickers on the calls' threads. */
    private volatile ConnectivityStateInfo state = ConnectivityStateInfo.forNonError(ConnectivityState.IDLE);
    private final Set<Pick> unopened = ConcurrentHashMap.newKeySet();
    /**
     * Why its last connection attempt failed, until it is READY again (the synchronization
     * context's only): as pick_first's "sticky TRANSIENT_FAILURE", a failing endpoint that tries
     * again still counts as failing.
     */
    private Status failure;

    Endpoint(long id, Subchannel subchannel, EquivalentAddressGroup group) {
        this.id = id;
        this.subchannel = subchannel;
        setFields(group);
    }

    /**
     * Weight, warm-up and zone from the resolver's attribute; Dubbo's defaults without it. A
     * negative weight is 0, as Dubbo reads one: the library rejects a set with a negative weight,
     * so one such endpoint would keep every other out of the set.
     */
    void setFields(EquivalentAddressGroup group) {
        // The first address places it on the hash rings, as in the Go policy: listed in another
        // order, the same endpoint (same id) moves there.
        addresses = group.getAddresses();
        String address = addressOf(addresses.get(0));
        Invoker template = group.getAttributes().get(PolylbGrpc.INVOKER);
        fields = template == null ? Invoker.of(id, address) : new Invoker(id, address,
                Math.max(template.weight(), 0), template.startTimeMs(), template.warmupMs(), template.zone());
    }

    List<SocketAddress> addresses() {
        return addresses;
    }

    Invoker invoker() {
        return fields;
    }

    boolean isReady() {
        return state.getState() == ConnectivityState.READY;
    }

    /** Why it failed, while it has not been READY since; null otherwise. */
    Status failure() {
        return failure;
    }

    boolean isRetired() {
        return state.getState() == ConnectivityState.SHUTDOWN;
    }

    /** A new state from the subchannel; leaving READY cancels the picks gRPC could not open. */
    void setState(ConnectivityStateInfo newState) {
        state = newState;
        if (newState.getState() == ConnectivityState.TRANSIENT_FAILURE) {
            failure = newState.getStatus();
        } else if (newState.getState() == ConnectivityState.READY) {
            failure = null;
        }
        if (newState.getState() != ConnectivityState.READY) {
            sweep();
        }
    }

    /** The resolver dropped the endpoint. */
    void retire() {
        state = ConnectivityStateInfo.forNonError(ConnectivityState.SHUTDOWN);
        subchannel.shutdown();
        sweep();
    }

    /**
     * Holds a pick until gRPC opens its stream. False when the endpoint is no longer READY: the
     * state change's sweep may have run already, so the caller cancels the pick itself (the
     * volatile state written before the sweep and read after the add: one of the two sees it).
     */
    boolean hold(Pick pick) {
        unopened.add(pick);
        if (isReady()) {
            return true;
        }
        unopened.remove(pick);
        return false;
    }

    void release(Pick pick) {
        unopened.remove(pick);
    }

    private void sweep() {
        for (Pick pick : unopened) {
            unopened.remove(pick);
            if (pick.cancelIfUnused()) {
                DROPPED_PICKS.increment();
            }
        }
    }

    /** {@code host:port} as the invoker's address (it places the endpoint on hash rings). */
    private static String addressOf(SocketAddress socketAddress) {
        if (socketAddress instanceof InetSocketAddress inet) {
            return inet.getHostString() + ":" + inet.getPort();
        }
        return socketAddress.toString();
    }
}
