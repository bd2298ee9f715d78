package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.grpc.CallOptions;
import io.grpc.ClientStreamTracer;
import io.grpc.ConnectivityState;
import io.grpc.ConnectivityStateInfo;
import io.grpc.EquivalentAddressGroup;
import io.grpc.LoadBalancer.PickResult;
import io.grpc.LoadBalancer.PickSubchannelArgs;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.polylb.Balancer;
import io.polylb.Invoker;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * What a pick and its stream's end allocate does not depend on the endpoints' ids. The policy
 * numbers endpoints from 1 over a channel's life, so after some churn (a rolling restart, a
 * resolver that re-resolves to new addresses) every id is above 127, beyond the JVM's cache of
 * boxed {@code Long}s: a lookup of the picked endpoint by a boxed id then allocated a
 * {@code Long} (24 B) on every pick. Measured with the thread's allocation counter after the
 * loop has been compiled; compared between two sets of ids rather than against a number, as
 * what gRPC's own objects (the pick result, the tracer) take is not the policy's to fix.
 */
class PickAllocationTest {
    private static final com.sun.management.ThreadMXBean THREADS =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    private static final int PICKS = 200_000;

    /** One set of headers for every pick, so that the fake allocates nothing of its own. */
    private static final class Args extends PickSubchannelArgs {
        private final Metadata headers = new Metadata();

        @Override
        public CallOptions getCallOptions() {
            return CallOptions.DEFAULT;
        }

        @Override
        public Metadata getHeaders() {
            return headers;
        }

        @Override
        public MethodDescriptor<?, ?> getMethodDescriptor() {
            return EchoService.CALL;
        }
    }

    private static double bytesPerPick(long firstId) {
        try (Balancer lb = new Balancer("loadbalance=random")) {
            List<Invoker> invokers = new ArrayList<>();
            Map<Long, Endpoint> ready = new HashMap<>();
            for (long id = firstId; id < firstId + 10; id++) {
                Endpoint endpoint = new Endpoint(id, new PickFakes.FakeSubchannel(),
                        new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", 20000 + (int) (id % 1000))));
                endpoint.setState(ConnectivityStateInfo.forNonError(ConnectivityState.READY));
                invokers.add(endpoint.invoker());
                ready.put(id, endpoint);
            }
            lb.update(invokers);
            PolylbPicker picker = new PolylbPicker(new BalancerState(lb, false), ready);
            Args args = new Args();
            ClientStreamTracer.StreamInfo info = ClientStreamTracer.StreamInfo.newBuilder().build();
            Metadata headers = new Metadata();
            for (int round = 0; round < 20; round++) {
                pickAndClose(picker, args, info, headers, PICKS / 10);
            }
            // The least of three rounds: a round may include a one-off allocation of the runtime
            // (a recompilation), never less than what every pick takes.
            long least = Long.MAX_VALUE;
            long thread = Thread.currentThread().getId();
            for (int round = 0; round < 3; round++) {
                long before = THREADS.getThreadAllocatedBytes(thread);
                pickAndClose(picker, args, info, headers, PICKS);
                least = Math.min(least, THREADS.getThreadAllocatedBytes(thread) - before);
            }
            assertEquals(0, PickFakes.active(lb));
            return (double) least / PICKS;
        }
    }

    private static void pickAndClose(PolylbPicker picker, PickSubchannelArgs args,
            ClientStreamTracer.StreamInfo info, Metadata headers, int picks) {
        for (int i = 0; i < picks; i++) {
            PickResult result = picker.pickSubchannel(args);
            ClientStreamTracer tracer = result.getStreamTracerFactory().newClientStreamTracer(info, headers);
            tracer.outboundHeaders();
            tracer.inboundTrailers(headers);
            tracer.streamClosed(Status.OK);
        }
    }

    @Test
    void endpointIdsBeyondTheBoxCacheCostNothingPerPick() {
        double small = bytesPerPick(1);
        double large = bytesPerPick(1_001);
        // A boxed Long is 16-24 B a pick; a one-off allocation spreads to a fraction of a byte.
        assertEquals(small, large, 8, "B per pick with ids 1..10, with ids 1001..1010");
    }
}
