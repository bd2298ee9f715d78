package io.polylb.spring;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Reads one invoker row's counters out of Balancer#statsJson (the row's fields precede its "methods"). */
final class Stats {
    private Stats() {}

    static long number(String json, String address, String field) {
        Matcher m = Pattern.compile("\"address\":\"" + Pattern.quote(address) + "\"[^\\[]*?\"" + field + "\":(-?\\d+)")
                .matcher(json);
        if (!m.find()) {
            throw new AssertionError("no " + field + " for " + address + " in " + json);
        }
        return Long.parseLong(m.group(1));
    }

    static boolean flag(String json, String address, String field) {
        Matcher m = Pattern.compile("\"address\":\"" + Pattern.quote(address) + "\"[^\\[]*?\"" + field + "\":(true|false)")
                .matcher(json);
        if (!m.find()) {
            throw new AssertionError("no " + field + " for " + address + " in " + json);
        }
        return Boolean.parseBoolean(m.group(1));
    }

    /** The sum of "active" (calls in flight) over the invoker rows (not their per-method rows). */
    static long active(String json) {
        Matcher m = Pattern.compile("\"warmup_ms\":-?\\d+,\"active\":(-?\\d+)").matcher(json);
        long sum = 0;
        while (m.find()) {
            sum += Long.parseLong(m.group(1));
        }
        return sum;
    }
}
