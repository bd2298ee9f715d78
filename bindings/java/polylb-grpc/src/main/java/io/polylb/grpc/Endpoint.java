package io.polylb.grpc;

import io.grpc.ConnectivityState;
import io.grpc.ConnectivityStateInfo;
import io.grpc.EquivalentAddressGroup;
import io.grpc.LoadBalancer.Subchannel;
import io.grpc.Status;
import io.polylb.Invoker;
import java.net.Inet6Address;
import java.net.InetAddress;
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
    /** It has been READY (the synchronization context's only): a later READY is a reconnect. */
    private boolean wasReady;

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
        String address = libraryText(addressOf(addresses.get(0)));
        Invoker template = group.getAttributes().get(PolylbGrpc.INVOKER);
        fields = template == null ? Invoker.of(id, address) : new Invoker(id, address,
                Math.max(template.weight(), 0), template.startTimeMs(), template.warmupMs(),
                template.zone() == null ? null : libraryText(template.zone()));
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

    /**
     * A new state from the subchannel; leaving READY cancels the picks gRPC could not open.
     * Returns true for a reconnect: READY again after another state (not its first READY).
     */
    boolean setState(ConnectivityStateInfo newState) {
        boolean reconnected = newState.getState() == ConnectivityState.READY && wasReady && !isReady();
        state = newState;
        if (newState.getState() == ConnectivityState.TRANSIENT_FAILURE) {
            failure = newState.getStatus();
        } else if (newState.getState() == ConnectivityState.READY) {
            failure = null;
            wasReady = true;
        }
        if (newState.getState() != ConnectivityState.READY) {
            sweep();
        }
        return reconnected;
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

    /**
     * {@code host:port} as the invoker's address (it places the endpoint on hash rings): the IP
     * as grpc-go's resolvers write it ({@code 10.0.0.1:443}, {@code [::1]:443}), so that a key
     * goes to the same server from Java and Go clients. Not the host name a resolved address
     * also carries: every address of {@code dns:///svc:443} carries {@code svc}, and all its
     * servers were one invoker address, every key hashed to one of them. An unresolved address
     * is its name.
     */
    static String addressOf(SocketAddress socketAddress) {
        if (socketAddress instanceof InetSocketAddress inet) {
            InetAddress ip = inet.getAddress();
            if (ip == null) {
                return hostPort(inet.getHostString(), inet.getPort());
            }
            if (ip instanceof Inet6Address v6) {
                return "[" + ipv6Text(v6) + "]:" + inet.getPort();
            }
            return ip.getHostAddress() + ":" + inet.getPort();
        }
        return socketAddress.toString();
    }

    private static String hostPort(String host, int port) {
        return (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + port;
    }

    /**
     * RFC 5952's form, as Go's {@code net.IP.String} writes it: lower-case hex without leading
     * zeros, the longest run of two or more zero groups (the first of equal ones) as
     * {@code ::}, and the zone after {@code %}. Java's own form keeps every group.
     */
    static String ipv6Text(Inet6Address ip) {
        byte[] b = ip.getAddress();
        int[] groups = new int[8];
        for (int i = 0; i < 8; i++) {
            groups[i] = ((b[2 * i] & 0xff) << 8) | (b[2 * i + 1] & 0xff);
        }
        int bestStart = -1;
        int bestLength = 1;
        for (int i = 0; i < 8; ) {
            int j = i;
            while (j < 8 && groups[j] == 0) {
                j++;
            }
            if (j - i > bestLength) {
                bestStart = i;
                bestLength = j - i;
            }
            i = j == i ? i + 1 : j;
        }
        StringBuilder text = new StringBuilder();
        for (int i = 0; i < 8; i++) {
            if (i == bestStart) {
                text.append("::");
                i += bestLength - 1;
                continue;
            }
            if (text.length() > 0 && text.charAt(text.length() - 1) != ':') {
                text.append(':');
            }
            text.append(Integer.toHexString(groups[i]));
        }
        if (ip.getScopedInterface() != null) {
            text.append('%').append(ip.getScopedInterface().getName());
        } else if (ip.getScopeId() != 0) {
            text.append('%').append(ip.getScopeId());
        }
        return text.toString();
    }

    /**
     * The text with each lone surrogate written as its three bytes in {@code \xNN} escapes
     * (as the Go policy writes a byte that is not UTF-8): the library takes UTF-8 and rejects a
     * whole set for one address or zone that has no UTF-8 form, so one such endpoint would keep
     * every other out of the set.
     */
    static String libraryText(String text) {
        StringBuilder escaped = null;
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            boolean paired = Character.isHighSurrogate(c) && i + 1 < text.length()
                    && Character.isLowSurrogate(text.charAt(i + 1));
            if (paired) {
                if (escaped != null) {
                    escaped.append(c).append(text.charAt(i + 1));
                }
                i++;
                continue;
            }
            if (!Character.isSurrogate(c)) {
                if (escaped != null) {
                    escaped.append(c);
                }
                continue;
            }
            if (escaped == null) {
                escaped = new StringBuilder(text.length() + 16).append(text, 0, i);
            }
            // A surrogate's generalised UTF-8 form: 1110xxxx 10xxxxxx 10xxxxxx.
            escaped.append(String.format("\\x%02x\\x%02x\\x%02x",
                    0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f)));
        }
        return escaped == null ? text : escaped.toString();
    }
}
