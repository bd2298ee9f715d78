package io.polylb;

/**
 * A polylb call failed. {@link #status()} says why (stable codes), the message is the library's
 * own text (for bad configuration it names the key and suggests the nearest valid one).
 */
public class PolylbException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final Status status;
    private final int code;

    public PolylbException(Status status, int code, String message) {
        super(message);
        this.status = status;
        this.code = code;
    }

    public Status status() {
        return status;
    }

    /** The raw status code (useful when {@link #status()} is {@link Status#UNKNOWN}). */
    public int code() {
        return code;
    }

    /** An exception for a status code (either sign), with the library's static text. */
    static PolylbException of(long statusCode) {
        return of(statusCode, null);
    }

    static PolylbException of(long statusCode, String detail) {
        int code = (int) Math.abs(statusCode);
        Status status = Status.of(code);
        String text = Native.statusMessage(code);
        if (text == null) {
            text = "unknown polylb status " + code;
        }
        String message = detail == null || detail.isEmpty() ? text : detail;
        return new PolylbException(status, code, status + ": " + message);
    }
}
