package io.polylb.grpc;

import io.grpc.Status;
import io.polylb.Outcome;

/**
 * How a gRPC status reads as a polylb outcome, by the table of docs/outcomes.md: a verdict on the
 * provider, not on the request. Public for code that reports to a {@code Balancer} itself.
 */
public final class Outcomes {
    private Outcomes() {}

    /**
     * The outcome of a call that ended with {@code status}.
     *
     * @param status the call's final status
     * @param ownCancel whether the call's own side gave it up (its {@code Context} cancelled, a
     *     {@code ClientCall.cancel}): it tells a CANCELLED of this side (no verdict on the
     *     provider) from one the provider sent or reset the stream with (a failure)
     * @return the outcome to report; a {@code RESOURCE_EXHAUSTED} that gRPC's size check worded
     *     (a message over a receiver's limit, either side's) is a success; the {@code UNAVAILABLE}
     *     of a call this side's channel shut down ("Channel shutdownNow invoked", "Channel
     *     shutdown invoked") a cancel
     */
    public static Outcome of(Status status, boolean ownCancel) {
        switch (status.getCode()) {
            case OK:
            // The service's own refusals: a quick, correct answer from a healthy provider.
            case INVALID_ARGUMENT:
            case NOT_FOUND:
            case ALREADY_EXISTS:
            case PERMISSION_DENIED:
            case UNAUTHENTICATED:
            case FAILED_PRECONDITION:
            case ABORTED:
            case OUT_OF_RANGE:
                return Outcome.SUCCESS;
            case DEADLINE_EXCEEDED:
                return Outcome.TIMEOUT;
            case CANCELLED:
                return ownCancel ? Outcome.CANCELLED : Outcome.FAILURE;
            case UNAVAILABLE:
                // This side's channel shut down: no verdict on a provider that did nothing.
                return shutDownHere(status.getDescription()) ? Outcome.CANCELLED : Outcome.FAILURE;
            case RESOURCE_EXHAUSTED:
                // A message over a receiver's size limit, this side's or the provider's: another
                // provider would do the same. Other RESOURCE_EXHAUSTED is the server shedding load.
                return overReceiveLimit(status.getDescription()) ? Outcome.SUCCESS : Outcome.FAILURE;
            default: // UNAVAILABLE, UNIMPLEMENTED, INTERNAL, UNKNOWN, DATA_LOSS
                return Outcome.FAILURE;
        }
    }

    /**
     * grpc-java's words for the calls of a channel this side shut down: {@code shutdownNow()}
     * ends those in flight with them, and {@code shutdown()} refuses new ones (ManagedChannelImpl's
     * SHUTDOWN_NOW_STATUS and SHUTDOWN_STATUS, both UNAVAILABLE). The call's {@code Context} is
     * not cancelled then, yet the provider did nothing: read as a failure, closing a channel
     * would count its calls in flight against their providers.
     */
    private static final String[] SHUTDOWN_HERE_WORDS = {
        "Channel shutdownNow invoked",
        "Channel shutdown invoked",
    };

    private static boolean shutDownHere(String description) {
        if (description == null) {
            return false;
        }
        for (String words : SHUTDOWN_HERE_WORDS) {
            if (description.startsWith(words)) {
                return true;
            }
        }
        return false;
    }

    /** gRPC's size check's words, in grpc-java's, grpc-go's and gRPC C-core's wording. */
    private static final String[] RECEIVE_LIMIT_WORDS = {
        "grpc message exceeds maximum size", // grpc-java, also decompressed
        "received message larger than max", // grpc-go, C-core
        "received message after decompression larger than max", // grpc-go
        "decompressed message larger than max", // C-core
    };

    private static boolean overReceiveLimit(String description) {
        if (description == null) {
            return false;
        }
        String words = description.toLowerCase(java.util.Locale.ROOT);
        for (String limit : RECEIVE_LIMIT_WORDS) {
            if (words.contains(limit)) {
                return true;
            }
        }
        return false;
    }
}
