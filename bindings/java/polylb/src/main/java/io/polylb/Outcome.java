package io.polylb;

/**
 * How a call ended, as reported with {@link Balancer#report}: a verdict on the provider, not on
 * the request (docs/outcomes.md maps gRPC and HTTP statuses). Codes are the C ABI's.
 */
public enum Outcome {
    /**
     * The provider answered, also with an error of the service's own (a business exception, a
     * gRPC NOT_FOUND, an HTTP 404): its latency feeds the latency-aware strategies.
     */
    SUCCESS(0),
    /** The provider could not serve (refused, reset, unavailable, overloaded, broken). */
    FAILURE(1),
    /** The caller's deadline passed before the answer: a failure, also counted as a timeout. */
    TIMEOUT(2),
    /**
     * The call was never sent, or was given up with no verdict on the provider (a user's cancel):
     * only undoes the in-flight count that select added; no latency, not a failure.
     */
    CANCELLED(3);

    private final int code;

    Outcome(int code) {
        this.code = code;
    }

    /**
     * The C ABI's code ({@code PLB_OUTCOME_*}).
     *
     * @return 0 to 3
     */
    public int code() {
        return code;
    }
}
