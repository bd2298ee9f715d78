package io.polylb.spring;

import io.polylb.Outcome;
import java.io.InterruptedIOException;
import java.util.BitSet;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.TimeoutException;

/**
 * Spring's completion of a request, read as a verdict on the instance (docs/outcomes.md): an
 * answer is a success unless its status says the instance could not serve.
 */
final class HttpOutcomes {
    /** docs/outcomes.md: 500, 502, 503 (every 5xx but 504), 429 and 408 say the provider failed. */
    static final String DEFAULT_FAILURE_STATUSES = "408,429,500-503,505-599";
    /** A gateway's 504: the provider behind it was too slow. */
    static final String DEFAULT_TIMEOUT_STATUSES = "504";

    private final BitSet failures;
    private final BitSet timeouts;

    HttpOutcomes(String failureStatuses, String timeoutStatuses) {
        this.failures = parse("failure-statuses", failureStatuses);
        this.timeouts = parse("timeout-statuses", timeoutStatuses);
    }

    Outcome ofStatus(int status) {
        if (status >= 0 && timeouts.get(status)) {
            return Outcome.TIMEOUT;
        }
        return status >= 0 && failures.get(status) ? Outcome.FAILURE : Outcome.SUCCESS;
    }

    /** An exception that ended the exchange: a timeout, a cancel by this side, else a failure. */
    static Outcome ofError(Throwable error) {
        // A chain may loop (A caused by B caused by A): each link is looked at once.
        Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Throwable t = error; t != null && seen.add(t); t = t.getCause()) {
            if (t instanceof TimeoutException || t instanceof InterruptedIOException
                    || t.getClass().getName().endsWith("TimeoutException")) {
                // java.util.concurrent's, SocketTimeoutException, HttpTimeoutException, and
                // Netty's ReadTimeoutException and Reactor's timeouts, known by name only.
                return Outcome.TIMEOUT;
            }
            if (t instanceof CancellationException || t instanceof InterruptedException) {
                return Outcome.CANCELLED;
            }
        }
        return Outcome.FAILURE;
    }

    /** "408,429,500-503": codes and inclusive ranges within 100..599; blank: none. */
    static BitSet parse(String key, String spec) {
        BitSet set = new BitSet(600);
        if (spec == null || spec.isBlank()) {
            return set;
        }
        for (String part : spec.split(",")) {
            String p = part.trim();
            try {
                int dash = p.indexOf('-');
                int from = Integer.parseInt(dash < 0 ? p : p.substring(0, dash).trim());
                int to = dash < 0 ? from : Integer.parseInt(p.substring(dash + 1).trim());
                if (from < 100 || to > 599 || from > to) {
                    throw new NumberFormatException();
                }
                set.set(from, to + 1);
            } catch (NumberFormatException bad) {
                throw new IllegalArgumentException("spring.cloud.loadbalancer.polylb." + key + ": '" + p
                        + "' is not an HTTP status or range of them (100..599, e.g. 500-503) in '" + spec + "'");
            }
        }
        return set;
    }
}
