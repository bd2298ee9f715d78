package io.polylb;

/** How a call ended, as reported with {@link Balancer#report}. Codes are the C ABI's. */
public enum Outcome {
    SUCCESS(0),
    FAILURE(1),
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

    public int code() {
        return code;
    }
}
