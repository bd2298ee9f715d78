package io.polylb.grpc;

import static io.polylb.grpc.PickFakes.readyEndpoint;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.ClientStreamTracer;
import io.grpc.Metadata;
import io.grpc.Status;
import io.polylb.Balancer;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * Where a CANCELLED came from, read by the stream's tracer as gRPC gives it: the provider's (its
 * trailers, its RST_STREAM) is a failure, this side's ({@code ClientCall.cancel}, a retried
 * attempt thrown away) no verdict at all.
 */
class CancelOriginTest {
    /** Ends one pick's stream with {@code status}; returns the invoker's counters after it. */
    private static JsonObject endWith(Status status, boolean trailers) {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            Endpoint endpoint = readyEndpoint();
            lb.update(List.of(endpoint.invoker()));
            PolylbPicker picker = new PolylbPicker(new BalancerState(lb, false), Map.of(1L, endpoint));
            ClientStreamTracer tracer = picker.pickSubchannel(new PickFakes.Args()).getStreamTracerFactory()
                    .newClientStreamTracer(ClientStreamTracer.StreamInfo.newBuilder().build(), new Metadata());
            tracer.outboundHeaders();
            if (trailers) {
                tracer.inboundTrailers(new Metadata());
            }
            tracer.streamClosed(status);
            return JsonParser.parseString(lb.statsJson()).getAsJsonObject()
                    .getAsJsonArray("invokers").get(0).getAsJsonObject();
        }
    }

    private static void expect(long failures, JsonObject invoker) {
        assertEquals(0, invoker.get("active").getAsLong(), invoker.toString());
        assertEquals(0, invoker.get("succeeded").getAsLong(), invoker.toString());
        assertEquals(failures, invoker.get("failures").getAsLong(), invoker.toString());
    }

    @Test
    void theProvidersCancelIsAFailure() {
        expect(1, endWith(Status.CANCELLED.withDescription("asked for"), true));
        // Netty's and OkHttp's words for a stream the provider reset with CANCEL.
        expect(1, endWith(Status.CANCELLED.withDescription("RST_STREAM closed stream. HTTP/2 error code: CANCEL"),
                false));
        expect(1, endWith(Status.CANCELLED.withDescription("Rst Stream"), false));
    }

    @Test
    void thisSidesCancelIsNoVerdict() {
        expect(0, endWith(Status.CANCELLED.withDescription("Call cancelled without message"), false));
        expect(0, endWith(Status.CANCELLED.withDescription("GrpcFuture was cancelled"), false));
        expect(0, endWith(Status.CANCELLED.withDescription("Stream thrown away because RetriableStream committed"),
                false));
        expect(0, endWith(Status.CANCELLED.withDescription("Unneeded hedging"), false));
        expect(0, endWith(Status.CANCELLED, false));
    }
}
