package io.polylb;

/** polylb's status codes (stable, never renumbered; see docs/abi-contract.md). */
public enum Status {
    /** Success (never thrown). */
    OK(0),
    /** A null pointer reached the native side (the Java API throws {@link NullPointerException} first). */
    NULL_POINTER(1),
    /** A config, address, zone, method name or key with no UTF-8 form (a lone surrogate). */
    INVALID_UTF8(2),
    /** An unknown key (the message suggests the nearest), a bad value or a duplicate key. */
    INVALID_CONFIG(3),
    /** An invoker with a negative weight. */
    NEGATIVE_WEIGHT(4),
    /** Two invokers of one update with the same id. */
    DUPLICATE_ID(5),
    /** An invoker id above {@code INT64_MAX}: in Java, a negative id. */
    ID_OUT_OF_RANGE(6),
    /** The invoker set is empty. */
    NO_PROVIDER(7),
    /** Every candidate was excluded. */
    NO_CANDIDATE(8),
    /** A candidate id is not in the current set. */
    UNKNOWN_CANDIDATE(9),
    /** A method id not returned by {@link Balancer#method}. */
    UNKNOWN_METHOD(10),
    /** An outcome code other than 0 to 3 (not from {@link Outcome}). */
    UNKNOWN_OUTCOME(11),
    /** A stats buffer too small (C ABI only; never from the Java API). */
    BUFFER_TOO_SMALL(12),
    /** A bug inside polylb, caught at the boundary. */
    PANIC(13),
    /**
     * An argument out of its range, e.g. a negative elapsed time, or an empty address in an update of
     * {@code consistenthash}, {@code boundedhash}, {@code maglev} or {@code rendezvous}.
     */
    INVALID_ARGUMENT(14),
    /**
     * A limit was reached, e.g. 2<sup>20</sup> method names per balancer, or an update of
     * {@code maglev} with more invokers than its table has slots ({@code maglev.tableSize}).
     */
    LIMIT_EXCEEDED(15),
    /** A code this version of the Java API does not know (a newer native library). */
    UNKNOWN(-1);

    private static final Status[] BY_CODE = values();

    private final int code;

    Status(int code) {
        this.code = code;
    }

    /**
     * The stable code (the C ABI's {@code PLB_OK} / {@code PLB_ERR_*}).
     *
     * @return the code, {@code -1} for {@link #UNKNOWN} (which is no code: {@link #of} reads
     *     {@code -1} as the negation of {@link #NULL_POINTER}'s; compare statuses, not codes)
     */
    public int code() {
        return code;
    }

    /**
     * The status for a code or its negation (hot calls return {@code -status}).
     *
     * @param code a status code, or its negation
     * @return the status; {@link #UNKNOWN} for a code this version does not know
     */
    public static Status of(long code) {
        long c = Math.abs(code); // negative only for Long.MIN_VALUE, which is no status
        return c >= 0 && c < BY_CODE.length - 1 ? BY_CODE[(int) c] : UNKNOWN;
    }
}
