package io.polylb.grpc;

import io.grpc.Attributes;
import io.grpc.CallOptions;
import io.grpc.ConnectivityState;
import io.grpc.ConnectivityStateInfo;
import io.grpc.EquivalentAddressGroup;
import io.grpc.LoadBalancer.PickSubchannelArgs;
import io.grpc.LoadBalancer.Subchannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.polylb.Balancer;
import java.net.InetSocketAddress;

/** gRPC's side of a pick, played by hand: a subchannel, a pick's arguments, a READY endpoint. */
final class PickFakes {
    private PickFakes() {}

    static final class FakeSubchannel extends Subchannel {
        @Override
        public void shutdown() {}

        @Override
        public void requestConnection() {}

        @Override
        public Attributes getAttributes() {
            return Attributes.EMPTY;
        }
    }

    static final class Args extends PickSubchannelArgs {
        private final CallOptions options;

        Args() {
            this(CallOptions.DEFAULT);
        }

        /** A pick of a call with these options (e.g. {@link PolylbGrpc#HASH_KEY}). */
        Args(CallOptions options) {
            this.options = options;
        }

        @Override
        public CallOptions getCallOptions() {
            return options;
        }

        @Override
        public Metadata getHeaders() {
            return new Metadata();
        }

        @Override
        public MethodDescriptor<?, ?> getMethodDescriptor() {
            return EchoService.CALL;
        }
    }

    /** The calls in flight on the balancer's first invoker. */
    static long active(Balancer lb) {
        return Long.parseLong(lb.statsJson().replaceAll("(?s).*?\"active\":(\\d+).*", "$1"));
    }

    static Endpoint readyEndpoint() {
        Endpoint endpoint = new Endpoint(1, new FakeSubchannel(),
                new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", 1)));
        endpoint.setState(ConnectivityStateInfo.forNonError(ConnectivityState.READY));
        return endpoint;
    }
}
