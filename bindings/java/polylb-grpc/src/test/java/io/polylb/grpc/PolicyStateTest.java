package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import io.grpc.Attributes;
import io.grpc.ChannelLogger;
import io.grpc.ConnectivityState;
import io.grpc.ConnectivityStateInfo;
import io.grpc.EquivalentAddressGroup;
import io.grpc.LoadBalancer;
import io.grpc.LoadBalancer.CreateSubchannelArgs;
import io.grpc.LoadBalancer.PickResult;
import io.grpc.LoadBalancer.ResolvedAddresses;
import io.grpc.LoadBalancer.Subchannel;
import io.grpc.LoadBalancer.SubchannelPicker;
import io.grpc.LoadBalancer.SubchannelStateListener;
import io.grpc.Status;
import io.polylb.Balancer;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The policy's states, with gRPC's side played by hand: subchannels whose states the test sets,
 * and a helper that keeps what the policy sends up.
 */
class PolicyStateTest {
    private final List<FakeSubchannel> subchannels = new ArrayList<>();
    private ConnectivityState state;
    private SubchannelPicker picker;
    private Balancer balancer;
    private final FakeHelper helper = new FakeHelper();
    private final PolylbLoadBalancer policy = new PolylbLoadBalancer(helper, lb -> balancer = lb);

    @AfterEach
    void shutdown() {
        policy.shutdown();
    }

    private final class FakeSubchannel extends Subchannel {
        final CreateSubchannelArgs args;
        SubchannelStateListener listener;
        boolean shutdown;

        FakeSubchannel(CreateSubchannelArgs args) {
            this.args = args;
        }

        @Override
        public void start(SubchannelStateListener newListener) {
            listener = newListener;
        }

        @Override
        public void shutdown() {
            shutdown = true;
        }

        @Override
        public void requestConnection() {}

        @Override
        public Attributes getAttributes() {
            return Attributes.EMPTY;
        }

        void set(ConnectivityState newState) {
            listener.onSubchannelState(newState == ConnectivityState.TRANSIENT_FAILURE
                    ? ConnectivityStateInfo.forTransientFailure(Status.UNAVAILABLE.withDescription("refused"))
                    : ConnectivityStateInfo.forNonError(newState));
        }
    }

    private final class FakeHelper extends LoadBalancer.Helper {
        @Override
        public Subchannel createSubchannel(CreateSubchannelArgs args) {
            FakeSubchannel subchannel = new FakeSubchannel(args);
            subchannels.add(subchannel);
            return subchannel;
        }

        @Override
        public void updateBalancingState(ConnectivityState newState, SubchannelPicker newPicker) {
            state = newState;
            picker = newPicker;
        }

        @Override
        public void refreshNameResolution() {}

        @Override
        public String getAuthority() {
            return "test";
        }

        @Override
        public ChannelLogger getChannelLogger() {
            throw new UnsupportedOperationException();
        }

        @Override
        public io.grpc.ManagedChannel createOobChannel(EquivalentAddressGroup eag, String authority) {
            throw new UnsupportedOperationException();
        }
    }

    private void resolve(int... ports) {
        List<EquivalentAddressGroup> groups = new ArrayList<>();
        for (int port : ports) {
            groups.add(new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", port)));
        }
        resolve(groups);
    }

    private void resolve(List<EquivalentAddressGroup> groups) {
        Status accepted = policy.acceptResolvedAddresses(ResolvedAddresses.newBuilder()
                .setAddresses(groups)
                .setLoadBalancingPolicyConfig(new PolylbConfig("", false))
                .build());
        assertEquals(Status.Code.OK, accepted.getCode());
    }

    private PickResult pick() {
        return picker.pickSubchannel(new PickFakes.Args());
    }

    /**
     * As gRPC's pick_first (and round_robin over it): once every endpoint failed, the channel
     * stays TRANSIENT_FAILURE while they retry, until one is READY. Calls without wait-for-ready
     * fail at once, rather than wait out each reconnect attempt (up to the connect timeout, 20 s
     * by default, against an address that drops packets).
     */
    @Test
    void everyEndpointFailingStaysFailingWhileTheyReconnect() {
        resolve(1, 2);
        subchannels.forEach(s -> s.set(ConnectivityState.CONNECTING));
        assertEquals(ConnectivityState.CONNECTING, state);
        subchannels.forEach(s -> s.set(ConnectivityState.TRANSIENT_FAILURE));
        assertEquals(ConnectivityState.TRANSIENT_FAILURE, state);
        assertFalse(pick().getStatus().isOk());

        subchannels.get(0).set(ConnectivityState.CONNECTING); // its backoff is over: it retries
        assertEquals(ConnectivityState.TRANSIENT_FAILURE, state);
        assertFalse(pick().getStatus().isOk(), "a call without wait-for-ready waits for the reconnect");

        subchannels.get(0).set(ConnectivityState.READY);
        assertEquals(ConnectivityState.READY, state);
        assertEquals(subchannels.get(0), pick().getSubchannel());
    }

    /**
     * A negative weight from the resolver's attribute is read as 0, as Dubbo reads one: the
     * library rejects a set with it, and every update would keep the set without the endpoints
     * that came after it.
     */
    @Test
    void aNegativeWeightIsZero() {
        resolve(List.of(
                PolylbGrpc.withWeight(new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", 1)), -5),
                new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", 2))));
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        assertEquals(ConnectivityState.READY, state);
        assertEquals(subchannels.get(1), pick().getSubchannel());
        assertEquals(0, balancer.statsJson().contains("\"weight\":0,") ? 0 : 1, balancer.statsJson());
    }
}
