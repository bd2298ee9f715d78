package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.common.util.concurrent.ListenableFuture;
import io.grpc.CallOptions;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import io.polylb.Outcome;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** {@link Outcomes#of}: RESOURCE_EXHAUSTED read by who refused what, UNAVAILABLE by who ended the call. */
class OutcomesTest {
    private static Outcome exhausted(String description) {
        return Outcomes.of(Status.RESOURCE_EXHAUSTED.withDescription(description), false);
    }

    @Test
    void aMessageOverAReceiveLimitIsASuccessAndSheddingAFailure() {
        // gRPC's size check, in grpc-java's, grpc-go's and C-core's words: either side's limit.
        assertEquals(Outcome.SUCCESS, exhausted("gRPC message exceeds maximum size 1: 29"));
        assertEquals(Outcome.SUCCESS, exhausted("Decompressed gRPC message exceeds maximum size 1"));
        assertEquals(Outcome.SUCCESS, exhausted("grpc: received message larger than max (29 vs. 1)"));
        assertEquals(Outcome.SUCCESS, exhausted("SERVER: Received message larger than max (29 vs. 1)"));
        // The server's own limits (load shedding, quotas): a failure.
        assertEquals(Outcome.FAILURE, exhausted("too many requests"));
        assertEquals(Outcome.FAILURE, exhausted(null));
        assertEquals(Outcome.FAILURE, Outcomes.of(Status.RESOURCE_EXHAUSTED, true));
    }

    /**
     * A call this side's channel cut ({@code shutdownNow}) or refused ({@code shutdown}) ends
     * UNAVAILABLE with gRPC's own words, its Context not cancelled: no verdict on the provider.
     */
    @Test
    void aCallThisSidesChannelShutDownIsACancel() throws Exception {
        try (Provider provider = new Provider("a")) {
            SocketAddress address = provider.endpoint().getAddresses().get(0);
            ManagedChannel channel = NettyChannelBuilder.forAddress((InetSocketAddress) address).usePlaintext().build();
            ListenableFuture<String> held = ClientCalls.futureUnaryCall(
                    channel.newCall(EchoService.CALL, CallOptions.DEFAULT), "hang");
            assertTrue(provider.started.await(5, TimeUnit.SECONDS), "the call at the provider");
            channel.shutdownNow();
            Status cut = Status.fromThrowable(assertThrows(ExecutionException.class, held::get).getCause());
            assertEquals(Status.Code.UNAVAILABLE, cut.getCode(), cut.toString());
            assertEquals(Outcome.CANCELLED, Outcomes.of(cut, false), cut.toString());
            Status refused = assertThrows(StatusRuntimeException.class, () -> ClientCalls.blockingUnaryCall(
                    channel, EchoService.CALL, CallOptions.DEFAULT, "")).getStatus();
            assertEquals(Status.Code.UNAVAILABLE, refused.getCode(), refused.toString());
            assertEquals(Outcome.CANCELLED, Outcomes.of(refused, false), refused.toString());
            channel.awaitTermination(5, TimeUnit.SECONDS);
        }
        // The provider's own UNAVAILABLE, and a connection lost, stay failures.
        assertEquals(Outcome.FAILURE, Outcomes.of(Status.UNAVAILABLE, false));
        assertEquals(Outcome.FAILURE, Outcomes.of(Status.UNAVAILABLE.withDescription("io exception"), true));
    }
}
