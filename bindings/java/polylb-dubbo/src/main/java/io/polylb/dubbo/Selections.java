package io.polylb.dubbo;

import io.polylb.Balancer;
import io.polylb.Outcome;
import java.util.ArrayList;
import java.util.Objects;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invocation;

/**
 * The picks made for one invocation, kept in its attributes until each is reported.
 *
 * <p>polylb counts a pick as in flight until it is reported, but Dubbo may discard a pick
 * (reselect after a pick that failover already tried, an unavailable pick, an exception before
 * sending). So every pick is recorded here; {@link PolylbInvokerFilter} claims the one that is
 * actually sent and reports its outcome, and {@link PolylbClusterFilter} reports the others as
 * {@link Outcome#CANCELLED} when the invocation ends.
 */
final class Selections {
    static final String ATTRIBUTE = "polylb.selections";
    /** A safety net for invocations that are never finished (and reused): older picks are released. */
    static final int MAX_PENDING = 16;

    /** One pick. Mutable state is guarded by the enclosing Selections' lock. */
    static final class Selection {
        final Balancer balancer;
        final int method;
        final long id;
        final URL url;
        final boolean adaptive;
        boolean started;
        long startNanos;

        Selection(Balancer balancer, int method, long id, URL url, boolean adaptive) {
            this.balancer = balancer;
            this.method = method;
            this.id = id;
            this.url = url;
            this.adaptive = adaptive;
        }
    }

    private final ArrayList<Selection> entries = new ArrayList<>(2);

    static void record(Invocation invocation, Selection selection) {
        Object existing = invocation.get(ATTRIBUTE);
        Selections selections;
        if (existing instanceof Selections) {
            selections = (Selections) existing;
        } else {
            selections = new Selections();
            invocation.put(ATTRIBUTE, selections);
        }
        Selection evicted = selections.add(selection);
        if (evicted != null) {
            cancel(evicted);
        }
    }

    static Selections of(Invocation invocation) {
        Object existing = invocation.get(ATTRIBUTE);
        return existing instanceof Selections ? (Selections) existing : null;
    }

    private synchronized Selection add(Selection selection) {
        Selection evicted = null;
        if (entries.size() >= MAX_PENDING) {
            for (int i = 0; i < entries.size(); i++) {
                if (!entries.get(i).started) {
                    evicted = entries.remove(i);
                    break;
                }
            }
        }
        entries.add(selection);
        return evicted;
    }

    /** Marks the newest unsent pick for the provider at {@code url} as sent now. */
    synchronized Selection start(URL url) {
        for (int i = entries.size() - 1; i >= 0; i--) {
            Selection s = entries.get(i);
            if (!s.started && sameProvider(s.url, url)) {
                s.started = true;
                s.startNanos = System.nanoTime();
                return s;
            }
        }
        return null;
    }

    /** Removes and returns the sent pick for the provider at {@code url}. */
    synchronized Selection finish(URL url) {
        for (int i = 0; i < entries.size(); i++) {
            Selection s = entries.get(i);
            if (s.started && sameProvider(s.url, url)) {
                return entries.remove(i);
            }
        }
        return null;
    }

    /** Removes and returns every pick that was never sent. */
    synchronized ArrayList<Selection> drainUnsent() {
        ArrayList<Selection> unsent = null;
        for (int i = entries.size() - 1; i >= 0; i--) {
            if (!entries.get(i).started) {
                if (unsent == null) {
                    unsent = new ArrayList<>(2);
                }
                unsent.add(entries.remove(i));
            }
        }
        return unsent;
    }

    /**
     * The invoker a filter sees is the protocol's (inside the filter chain), the one the balancer
     * picked is the directory's wrapper; they share the URL object or at least the address.
     */
    private static boolean sameProvider(URL picked, URL invoked) {
        return picked == invoked
                || (picked != null && invoked != null && Objects.equals(picked.getAddress(), invoked.getAddress()));
    }

    static void cancel(Selection s) {
        try {
            s.balancer.report(s.method, s.id, 0, Outcome.CANCELLED);
        } catch (RuntimeException ignored) {
            // The balancer was closed (application shutdown): nothing left to undo.
        }
    }

    /** Releases every unsent pick of an invocation (what PolylbClusterFilter does when it ends). */
    static void releaseUnsent(Invocation invocation) {
        Selections selections = of(invocation);
        if (selections == null) {
            return;
        }
        ArrayList<Selection> unsent = selections.drainUnsent();
        if (unsent != null) {
            for (Selection s : unsent) {
                cancel(s);
            }
        }
    }
}
