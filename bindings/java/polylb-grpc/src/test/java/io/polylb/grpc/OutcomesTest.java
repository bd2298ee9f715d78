package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.grpc.Status;
import io.polylb.Outcome;
import org.junit.jupiter.api.Test;

/** {@link Outcomes#of}: RESOURCE_EXHAUSTED read by who refused what. */
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
}
