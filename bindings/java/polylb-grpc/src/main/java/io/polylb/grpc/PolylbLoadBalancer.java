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
    private final Map<List<SocketAddress>, Endpoint> endpoints = new HashMap<>();
    private long lastId;
    private List<Invoker> set = List.of(); // the set the library holds, in id order
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
        if (!(resolved.getLoadBalancingPolicyConfig() instanceof PolylbConfig newConfig)) {
            return Status.INTERNAL.withDescription(
                    "polylb: config of type " + resolved.getLoadBalancingPolicyConfig() + ", want PolylbConfig");
        }
        if (resolved.getAddresses().isEmpty()) {
            Status error = Status.UNAVAILABLE.withDescription("polylb: the resolver gave no endpoints");
            handleNameResolutionError(error);
            return error;
        }
        if (state == null || !newConfig.equals(config)) {
            Balancer balancer;
            try {
                balancer = new Balancer(newConfig.config());
            } catch (PolylbException e) { // parseLoadBalancingPolicyConfig checked it; a guard
                return Status.INVALID_ARGUMENT.withDescription("polylb: " + e.getMessage());
            }
            BalancerState old = state;
            // Only orca weighs by ORCA's numbers; the other strategies open no streams.
            boolean outOfBand = newConfig.enableOobLoadReport() && "orca".equals(balancer.strategy());
            state = new BalancerState(balancer, newConfig.serviceLevel(), !outOfBand);
            config = newConfig;
            set = List.of(); // the new balancer holds no set yet
            publishedReady = null;
            if (old != null) {
                // Calls picked by the old balancer report to it after this and are ignored;
                // pickers over it still in gRPC's hands see it closed and wait for the new one.
                old.balancer.close();
            }
            observer.accept(balancer);
            // The same settings keep the open streams, which report to the new balancer.
            oob.configure(outOfBand, newConfig.oobReportingPeriodNanos(), endpoints.values());
        }
        updateEndpoints(resolved.getAddresses());
        updatePicker();
        return Status.OK;
    }

    /** Ids live while the resolver lists the endpoint, not while it is connected. */
    private void updateEndpoints(List<EquivalentAddressGroup> groups) {
        Set<List<SocketAddress>> listed = new HashSet<>();
        for (EquivalentAddressGroup group : groups) {
            List<SocketAddress> key = group.getAddresses();
            if (!listed.add(key)) {
                continue; // the same endpoint twice: one invoker
            }
            Endpoint endpoint = endpoints.get(key);
            if (endpoint != null) {
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
        endpoint.setState(newState);
        oob.update(endpoint);
        updatePicker();
    }

    /**
     * Puts every listed endpoint in the library's set (an update only when the set changed) and
     * sends up a picker over the READY ones (only when they changed: gRPC reports every
     * connectivity change of every endpoint). An endpoint whose connection is down stays in the
     * set, excluded by the picker: leaving the set would drop its state (latency estimates,
     * outlier ejection's record, the calls still running on its old connection) at every
     * reconnect.
     */
    private void updatePicker() {
        List<Endpoint> listed = new ArrayList<>(endpoints.values());
        listed.sort((a, b) -> Long.compare(a.id, b.id));
        List<Invoker> newSet = new ArrayList<>(listed.size());
        Map<Long, Endpoint> ready = new HashMap<>();
        List<Long> notReady = new ArrayList<>();
        for (Endpoint endpoint : listed) {
            newSet.add(endpoint.invoker());
            if (endpoint.isReady()) {
                ready.put(endpoint.id, endpoint);
            } else {
                notReady.add(endpoint.id);
            }
        }
        if (!newSet.equals(set)) {
            try {
                state.balancer.update(newSet);
            } catch (PolylbException e) {
                // The library keeps the previous set (a rejected update changes nothing), so the
                // picker stays the one over that set.
                logger.log(Level.WARNING, "polylb: update of " + newSet.size()
                        + " endpoints rejected, previous set kept: " + e.getMessage());
                return;
            }
            set = newSet;
            publishedReady = null; // a picker over the new set
        }
        if (ready.isEmpty()) {
            publishedReady = null;
            updateWithoutReady();
            return;
        }
        if (ready.keySet().equals(publishedReady)) {
            return; // same set, same READY endpoints: same picker
        }
        publishedReady = ready.keySet();
        PolylbPicker picker = new PolylbPicker(state, ready,
                notReady.stream().mapToLong(Long::longValue).toArray());
        picker.publishing(() -> helper.updateBalancingState(ConnectivityState.READY, picker));
    }

    /**
     * No endpoint READY: calls wait while one connects, and fail when every one is failing (also
     * while they try again, as pick_first does: calls without wait-for-ready fail at once rather
     * than wait out each attempt).
     */
    private void updateWithoutReady() {
        Status failure = null;
        for (Endpoint endpoint : endpoints.values()) {
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
