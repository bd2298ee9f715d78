package io.polylb.grpc;

import io.grpc.ConnectivityState;
import io.grpc.ConnectivityStateInfo;
import io.grpc.EquivalentAddressGroup;
import io.grpc.LoadBalancer;
import io.grpc.Status;
import io.polylb.Balancer;
import io.polylb.Invoker;
import io.polylb.PolylbException;
import java.net.SocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * One channel's policy: one subchannel per endpoint, every listed endpoint in the library's set,
 * and a picker over the READY ones. gRPC calls every method here in the channel's synchronization context.
 */
final class PolylbLoadBalancer extends LoadBalancer {
    private static final Logger logger = Logger.getLogger(PolylbLoadBalancer.class.getName());

    private final Helper helper;
    private final Consumer<Balancer> observer;
    private PolylbConfig config;
    /** Null until the first config; volatile for the out-of-band reports, read on gRPC's threads. */
    private volatile BalancerState state;
    /** Endpoints by their addresses (attributes may change without making a new endpoint). */
    /** By their addresses in any order, as grpc-go's EndpointMap keys them. */
    private final Map<Set<SocketAddress>, Endpoint> endpoints = new HashMap<>();
    private long lastId;
    private List<Invoker> set = List.of(); // the set the library holds, in id order
    /** The last set the library rejected (logged once), or null. */
    private List<Invoker> lastRejected;
    /** The ids of the READY endpoints of the picker last sent up, or null for another picker. */
    private Set<Long> publishedReady;
    private boolean shutdown;
    /** ORCA's out-of-band streams, for orca with enableOobLoadReport. */
    private final OrcaOob oob;

    PolylbLoadBalancer(Helper helper, Consumer<Balancer> observer) {
        this.helper = helper;
        this.observer = observer;
        this.oob = new OrcaOob(helper, () -> state);
    }

    @Override
    public Status acceptResolvedAddresses(ResolvedAddresses resolved) {
        Object given = resolved.getLoadBalancingPolicyConfig();
        // gRPC passes no config to a policy named by defaultLoadBalancingPolicy without a service
        // config: the entry's defaults, as "{}" gives.
        PolylbConfig newConfig = given == null ? new PolylbConfig("", false) : null;
        if (given instanceof PolylbConfig parsed) {
            newConfig = parsed;
        }
        if (newConfig == null) {
            Status error = Status.INTERNAL.withDescription(
                    "polylb: config of type " + given.getClass().getName() + ", want PolylbConfig");
            if (state == null) {
                helper.updateBalancingState(ConnectivityState.TRANSIENT_FAILURE, new FailingPicker(error));
            }
            return error;
        }
        if (resolved.getAddresses().isEmpty()) {
            Status error = Status.UNAVAILABLE.withDescription("polylb: the resolver gave no endpoints");
            handleNameResolutionError(error);
            return error;
        }
        updateEndpoints(resolved.getAddresses());
        Status rejected = null;
        if (state == null || !newConfig.equals(config)) {
            rejected = configure(newConfig);
            if (state == null) {
                return rejected; // no balancer could be made: the channel fails with the reason
            }
        }
        Status setRejected = updatePicker();
        return rejected != null ? rejected : setRejected == null ? Status.OK : setRejected;
    }

    /**
     * Moves to a balancer of {@code newConfig}, unless there is one already and the new one
     * rejects the listed endpoints (e.g. more than {@code maglev.tableSize}): the channel then goes
     * on with the balancer it has, and the rejection is returned (null when moved).
     */
    private Status configure(PolylbConfig newConfig) {
        Balancer balancer;
        try {
            balancer = new Balancer(newConfig.config());
        } catch (PolylbException e) {
            // parseLoadBalancingPolicyConfig checks the config, but a config built by hand is
            // not parsed: with no balancer yet, calls fail with the reason instead of waiting.
            Status error = Status.UNAVAILABLE.withDescription("polylb: " + e.getMessage());
            if (state == null) {
                helper.updateBalancingState(ConnectivityState.TRANSIENT_FAILURE, new FailingPicker(error));
            }
            return error;
        }
        List<Invoker> listed = listedSet();
        try {
            balancer.update(listed);
        } catch (PolylbException e) {
            if (state != null) {
                balancer.close();
                logger.log(Level.WARNING, "polylb: config " + Excerpts.quoted(newConfig.config()) + " rejected the " + listed.size()
                        + " endpoints, config " + Excerpts.quoted(config.config()) + " kept: " + e.getMessage());
                return rejection(e);
            }
            listed = List.of(); // the first config: updatePicker fails the channel with the reason
        }
        BalancerState old = state;
        // Only orca weighs by ORCA's numbers; the other strategies open no streams.
        boolean outOfBand = newConfig.enableOobLoadReport() && "orca".equals(balancer.strategy());
        state = new BalancerState(balancer, newConfig.serviceLevel(), !outOfBand);
        config = newConfig;
        set = listed;
        publishedReady = null;
        if (old != null) {
            // Calls picked by the old balancer report to it after this and are ignored;
            // pickers over it still in gRPC's hands see it closed and wait for the new one.
            old.balancer.close();
        }
        observer.accept(balancer);
        // The same settings keep the open streams, which report to the new balancer.
        oob.configure(outOfBand, newConfig.oobReportingPeriodNanos(), endpoints.values());
        return null;
    }

    private static Status rejection(PolylbException e) {
        return Status.UNAVAILABLE.withDescription("polylb: the library rejected the endpoints: " + e.getMessage());
    }

    /** Every listed endpoint's invoker, in id order. */
    private List<Invoker> listedSet() {
        List<Endpoint> listed = new ArrayList<>(endpoints.values());
        listed.sort((a, b) -> Long.compare(a.id, b.id));
        List<Invoker> invokers = new ArrayList<>(listed.size());
        for (Endpoint endpoint : listed) {
            invokers.add(endpoint.invoker());
        }
        return invokers;
    }

    /** Ids live while the resolver lists the endpoint, not while it is connected. */
    private void updateEndpoints(List<EquivalentAddressGroup> groups) {
        Set<Set<SocketAddress>> listed = new HashSet<>();
        for (EquivalentAddressGroup group : groups) {
            Set<SocketAddress> key = Set.copyOf(group.getAddresses());
            if (!listed.add(key)) {
                continue; // the same endpoint twice: one invoker
            }
            Endpoint endpoint = endpoints.get(key);
            if (endpoint != null) {
                if (!endpoint.addresses().equals(group.getAddresses())) {
                    // The same endpoint, its addresses in another order (the order it tries
                    // them in): the subchannel keeps its connection, the invoker its state.
                    endpoint.subchannel.updateAddresses(List.of(group));
                }
                endpoint.setFields(group);
                continue;
            }
            Subchannel subchannel = helper.createSubchannel(
                    CreateSubchannelArgs.newBuilder().setAddresses(group).build());
            Endpoint created = new Endpoint(++lastId, subchannel, group);
            endpoints.put(key, created);
            subchannel.start(newState -> onSubchannelState(created, newState));
            subchannel.requestConnection();
        }
        endpoints.entrySet().removeIf(entry -> {
            if (listed.contains(entry.getKey())) {
                return false;
            }
            oob.remove(entry.getValue());
            entry.getValue().retire();
            return true;
        });
    }

    private void onSubchannelState(Endpoint endpoint, ConnectivityStateInfo newState) {
        if (shutdown || endpoint.isRetired()) {
            return; // a late state of a subchannel the policy shut down
        }
        if (newState.getState() == ConnectivityState.IDLE
                || newState.getState() == ConnectivityState.TRANSIENT_FAILURE) {
            // gRPC-java's resolvers (DNS among them) resolve again only when the policy asks:
            // a provider that went away may have moved. pick_first asks on both.
            helper.refreshNameResolution();
        }
        if (newState.getState() == ConnectivityState.IDLE) {
            // A connection that closed: reconnect at once, as round_robin does.
            endpoint.subchannel.requestConnection();
        }
        if (endpoint.setState(newState)) {
            reportReconnect(endpoint);
        }
        oob.update(endpoint);
        updatePicker();
    }

    /**
     * An endpoint READY again after another state: the library restarts what it learnt of the
     * old connection's server ({@code orca} its run of load reports, with a new blackout, as
     * gRPC's {@code weighted_round_robin} resets an endpoint's weight when its subchannel becomes
     * READY: gRFC A58), before the picker that sends calls over the new connection. The other
     * strategies ignore it. Its first READY is not reported: there is nothing to restart.
     */
    private void reportReconnect(Endpoint endpoint) {
        BalancerState current = state;
        if (current == null) {
            return;
        }
        try {
            current.balancer.reportReconnect(endpoint.id);
        } catch (PolylbException | IllegalStateException e) {
            // Nothing to restart (a balancer closed under it): no call of the new connection
            // can report to it either.
        }
    }

    /**
     * Puts every listed endpoint in the library's set (an update only when the set changed) and
     * sends up a picker over the READY ones (only when they changed: gRPC reports every
     * connectivity change of every endpoint). An endpoint whose connection is down stays in the
     * set, excluded by the picker: leaving the set would drop its state (latency estimates,
     * outlier ejection's record, the calls still running on its old connection) at every
     * reconnect.
     */
    private Status updatePicker() {
        if (state == null) {
            return null; // no balancer could be made of the config: the channel stays failed
        }
        List<Invoker> newSet = listedSet();
        Status rejected = null;
        if (!newSet.equals(set)) {
            try {
                state.balancer.update(newSet);
                set = newSet;
                publishedReady = null; // a picker over the new set
                lastRejected = null;
            } catch (PolylbException e) {
                // The library keeps the previous set (a rejected update changes nothing): the
                // picker goes on over it, following its endpoints' states; with none kept (a
                // first set), the channel fails with the reason rather than wait for good.
                rejected = rejection(e);
                if (!newSet.equals(lastRejected)) {
                    lastRejected = newSet;
                    logger.log(Level.WARNING, "polylb: update of " + newSet.size()
                            + " endpoints rejected, previous set of " + set.size() + " kept: " + e.getMessage());
                }
                if (set.isEmpty()) {
                    publishedReady = null;
                    helper.updateBalancingState(ConnectivityState.TRANSIENT_FAILURE, new FailingPicker(rejected));
                    return rejected;
                }
            }
        }
        Set<Long> inSet = new HashSet<>();
        for (Invoker invoker : set) {
            inSet.add(invoker.id());
        }
        Map<Long, Endpoint> ready = new HashMap<>();
        List<Endpoint> members = new ArrayList<>();
        for (Endpoint endpoint : endpoints.values()) {
            if (!inSet.contains(endpoint.id)) {
                continue; // listed, but outside the set the library kept
            }
            members.add(endpoint);
            if (endpoint.isReady()) {
                ready.put(endpoint.id, endpoint);
            }
        }
        // Every other id of the kept set is excluded: those of endpoints not READY, and those of
        // endpoints the resolver dropped in an update the library refused (their subchannels
        // are shut down, but the library still has them; a pick of one waited for a picker
        // that would never come).
        List<Long> notReady = new ArrayList<>();
        for (Invoker invoker : set) {
            if (!ready.containsKey(invoker.id())) {
                notReady.add(invoker.id());
            }
        }
        if (ready.isEmpty()) {
            publishedReady = null;
            updateWithoutReady(members);
            return rejected;
        }
        if (ready.keySet().equals(publishedReady)) {
            return rejected; // same set, same READY endpoints: same picker
        }
        publishedReady = ready.keySet();
        notReady.sort(null);
        PolylbPicker picker = new PolylbPicker(state, ready,
                notReady.stream().mapToLong(Long::longValue).toArray());
        picker.publishing(() -> helper.updateBalancingState(ConnectivityState.READY, picker));
        return rejected;
    }

    /**
     * No endpoint READY: calls wait while one connects, and fail when every one is failing (also
     * while they try again, as pick_first does: calls without wait-for-ready fail at once rather
     * than wait out each attempt).
     */
    private void updateWithoutReady(List<Endpoint> members) {
        Status failure = null;
        for (Endpoint endpoint : members) {
            if (endpoint.failure() == null) {
                helper.updateBalancingState(ConnectivityState.CONNECTING, new SubchannelPicker() {
                    @Override
                    public PickResult pickSubchannel(PickSubchannelArgs args) {
                        return PickResult.withNoResult();
                    }
                });
                return;
            }
            failure = endpoint.failure();
        }
        Status error = Status.UNAVAILABLE.withDescription("polylb: no endpoint is reachable")
                .withCause(failure == null ? null : failure.asRuntimeException());
        helper.updateBalancingState(ConnectivityState.TRANSIENT_FAILURE, new FailingPicker(error));
    }

    @Override
    public void handleNameResolutionError(Status error) {
        if (publishedReady == null) {
            // With READY endpoints the calls go on over them; otherwise they fail with the reason.
            helper.updateBalancingState(ConnectivityState.TRANSIENT_FAILURE, new FailingPicker(error));
        }
    }

    @Override
    public void requestConnection() {
        for (Endpoint endpoint : endpoints.values()) {
            endpoint.subchannel.requestConnection();
        }
    }

    @Override
    public void shutdown() {
        shutdown = true;
        oob.shutdown();
        for (Endpoint endpoint : endpoints.values()) {
            endpoint.retire();
        }
        endpoints.clear();
        if (state != null) {
            state.balancer.close();
        }
    }

    private static final class FailingPicker extends SubchannelPicker {
        private final Status error;

        FailingPicker(Status error) {
            this.error = error;
        }

        @Override
        public PickResult pickSubchannel(PickSubchannelArgs args) {
            return PickResult.withError(error);
        }
    }
}
