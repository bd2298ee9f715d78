package io.polylb.grpc;

/**
 * What an error repeats of a service config: its first {@value #CHARS} characters, then its
 * length. The library cuts what it quotes at the same length, so a megabyte of config makes a
 * status (and a log line) of a kilobyte or so rather than a megabyte.
 */
final class Excerpts {
    static final int CHARS = 512;

    private Excerpts() {}

    /** {@code text} in double quotes, cut after {@value #CHARS} characters with its length said. */
    static String quoted(String text) {
        String head = head(text);
        return head.length() == text.length()
                ? "\"" + text + "\""
                : "\"" + head + "…\" (" + utf8Length(text) + " bytes)";
    }

    /** {@code value} as {@code toString} writes it, cut as {@link #quoted} cuts. */
    static String excerpt(Object value) {
        String text = String.valueOf(value);
        String head = head(text);
        return head.length() == text.length() ? text : head + "… (" + utf8Length(text) + " bytes)";
    }

    private static String head(String text) {
        if (text.codePointCount(0, text.length()) <= CHARS) {
            return text;
        }
        return text.substring(0, text.offsetByCodePoints(0, CHARS));
    }

    private static long utf8Length(String text) {
        long bytes = 0;
        for (int i = 0; i < text.length(); ) {
            int c = text.codePointAt(i);
            bytes += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
            i += Character.charCount(c);
        }
        return bytes;
    }
}
