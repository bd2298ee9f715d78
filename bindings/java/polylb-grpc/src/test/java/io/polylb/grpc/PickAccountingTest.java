package io.polylb.grpc;

import static io.polylb.grpc.Client.eventually;
import static io.polylb.grpc.PickFakes.active;
import static io.polylb.grpc.PickFakes.readyEndpoint;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ClientStreamTracer;
import io.grpc.ConnectivityState;
import io.grpc.ConnectivityStateInfo;
import io.grpc.LoadBalancer.PickResult;
import io.grpc.Metadata;
import io.grpc.Status;
import io.polylb.Balancer;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * Every select ends in exactly one report, also where gRPC drops the pick without a word. gRPC
 * drops it in a window of microseconds (the picked subchannel's transport closed between the
 * picker's making and the pick), which a test cannot aim at through a channel; so these tests
 * play gRPC's part on the picker directly: a pick returned and never opened, a stream tracer
 * created and never closed.
 */
class PickAccountingTest {
    @Test
    void aPickGrpcDroppedIsCancelledWhenItsEndpointLeavesReady() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            Endpoint endpoint = readyEndpoint();
            lb.update(List.of(endpoint.invoker()));
            PolylbPicker picker = new PolylbPicker(new BalancerState(lb, false), Map.of(1L, endpoint));

            PickResult dropped = picker.pickSubchannel(new PickFakes.Args()); // gRPC found no transport: no tracer
            assertNotNull(dropped.getSubchannel());
            assertEquals(1, active(lb));
            // The closed transport's state change reaches the policy: the pick is undone.
            endpoint.setState(ConnectivityStateInfo.forNonError(ConnectivityState.IDLE));
            assertEquals(0, active(lb));
            assertFalse(lb.statsJson().contains("\"failures\":1"));
            // Had gRPC opened it after all, its stream would report nothing more.
            ClientStreamTracer late = dropped.getStreamTracerFactory().newClientStreamTracer(
                    ClientStreamTracer.StreamInfo.newBuilder().build(), new Metadata());
            late.streamClosed(Status.UNAVAILABLE);
            assertEquals(0, active(lb));
            assertTrue(lb.statsJson().contains("\"failures\":0"), lb.statsJson());

            // On a picker still in gRPC's hands, a pick of the endpoint no longer READY is undone
            // at once and gRPC waits for the next picker.
            PickResult stale = picker.pickSubchannel(new PickFakes.Args());
            assertEquals(null, stale.getSubchannel());
            assertTrue(stale.getStatus().isOk());
            assertEquals(0, active(lb));
        }
    }

    @Test
    void anOpenedPickIsNotCancelledByTheSweep() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            Endpoint endpoint = readyEndpoint();
            lb.update(List.of(endpoint.invoker()));
            PolylbPicker picker = new PolylbPicker(new BalancerState(lb, false), Map.of(1L, endpoint));
            PickResult opened = picker.pickSubchannel(new PickFakes.Args());
            ClientStreamTracer tracer = opened.getStreamTracerFactory().newClientStreamTracer(
                    ClientStreamTracer.StreamInfo.newBuilder().build(), new Metadata());
            tracer.outboundHeaders();
            endpoint.setState(ConnectivityStateInfo.forNonError(ConnectivityState.IDLE));
            assertEquals(1, active(lb), "the stream is still running on the closing connection");
            tracer.streamClosed(Status.UNAVAILABLE);
            assertEquals(0, active(lb));
            assertTrue(lb.statsJson().contains("\"failures\":1"), lb.statsJson());
        }
    }

    @Test
    void aTracerNeverClosedIsCancelledOnceUnreachable() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            Endpoint endpoint = readyEndpoint();
            lb.update(List.of(endpoint.invoker()));
            PolylbPicker picker = new PolylbPicker(new BalancerState(lb, false), Map.of(1L, endpoint));
            // gRPC picked for a queued call as the picker was handed to it, created the stream's
            // tracer, then dropped the stream unstarted (the call was cancelled meanwhile).
            picker.publishing(() -> picker.pickSubchannel(new PickFakes.Args()).getStreamTracerFactory()
                    .newClientStreamTracer(ClientStreamTracer.StreamInfo.newBuilder().build(), new Metadata()));
            assertEquals(1, active(lb));
            eventually(() -> {
                System.gc();
                return active(lb) == 0;
            }, "the cleaner's cancel");
            assertTrue(lb.statsJson().contains("\"succeeded\":0,\"failures\":0"), lb.statsJson());
        }
    }
}
