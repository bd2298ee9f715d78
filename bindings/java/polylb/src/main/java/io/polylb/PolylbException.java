package io.polylb;

/**
 * A polylb call failed. {@link #status()} says why (stable codes), the message is the status's
 * name followed by the library's own text (for bad configuration it names the key and suggests
 * the nearest valid one).
 */
public class PolylbException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** Why the call failed. */
    private final Status status;
    /** The raw status code. */
    private final int code;

    /**
     * An exception as the library's calls throw it.
     *
     * @param status  why the call failed
     * @param code    the raw status code
     * @param message the message, as is
     */
    public PolylbException(Status status, int code, String message) {
        super(message);
        this.status = status;
        this.code = code;
    }

    /**
     * Why the call failed.
     *
     * @return the status ({@link Status#UNKNOWN} for a code this version does not know)
     */
    public Status status() {
        return status;
    }

    /**
     * The raw status code (useful when {@link #status()} is {@link Status#UNKNOWN}).
     *
     * @return the code
     */
    public int code() {
        return code;
    }

    /** An exception for a status code (either sign), with the library's static text. */
    static PolylbException of(long statusCode) {
        return of(statusCode, null);
    }

    static PolylbException of(long statusCode, String detail) {
        long magnitude = Math.abs(statusCode); // negative only for Long.MIN_VALUE
        int code = magnitude >= 0 && magnitude <= Integer.MAX_VALUE ? (int) magnitude : -1;
        Status status = Status.of(statusCode);
        String text = code < 0 ? null : Native.statusMessage(code);
        if (text == null) {
            text = "unknown polylb status " + statusCode;
        }
        String message = detail == null || detail.isEmpty() ? text : detail;
        return new PolylbException(status, code, status + ": " + message);
    }
}
