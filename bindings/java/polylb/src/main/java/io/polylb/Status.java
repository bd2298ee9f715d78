package io.polylb;

/** polylb's status codes (stable, never renumbered; see docs/abi-contract.md). */
public enum Status {
    OK(0),
    NULL_POINTER(1),
    INVALID_UTF8(2),
    INVALID_CONFIG(3),
    NEGATIVE_WEIGHT(4),
    DUPLICATE_ID(5),
    ID_OUT_OF_RANGE(6),
    NO_PROVIDER(7),
    NO_CANDIDATE(8),
    UNKNOWN_CANDIDATE(9),
    UNKNOWN_METHOD(10),
    UNKNOWN_OUTCOME(11),
    BUFFER_TOO_SMALL(12),
    PANIC(13),
    INVALID_ARGUMENT(14),
    LIMIT_EXCEEDED(15),
    /** A code this version of the Java API does not know (a newer native library). */
    UNKNOWN(-1);

    private static final Status[] BY_CODE = values();

    private final int code;

    Status(int code) {
        this.code = code;
    }

    public int code() {
        return code;
    }

    /** The status for a code or its negation (hot calls return {@code -status}). */
    public static Status of(long code) {
        long c = Math.abs(code);
        return c < BY_CODE.length - 1 ? BY_CODE[(int) c] : UNKNOWN;
    }
}
