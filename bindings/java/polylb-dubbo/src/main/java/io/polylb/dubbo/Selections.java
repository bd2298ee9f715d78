package io.polylb.dubbo;

import io.polylb.Balancer;
import io.polylb.Outcome;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
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

    /** One pick. Mutable state is guarded by the enclosing Selections' lock ({@link #lock}). */
    static final class Selection {
        final Balancer balancer;
        final int method;
        final long id;
        final URL url;
        final boolean adaptive;
        boolean started;
        long startNanos;
        /** The next newer pick of the same invocation (a list without a collection to allocate). */
        Selection next;

        Selection(Balancer balancer, int method, long id, URL url, boolean adaptive) {
            this.balancer = balancer;
            this.method = method;
            this.id = id;
            this.url = url;
            this.adaptive = adaptive;
        }
    }

    /** The invocation's picks still pending, oldest first, linked through {@code next}. */
    private Selection oldest;
    private int size;
    /**
     * {@link #LOCKED} while a thread works on the picks, and {@link #MARKED} while the
     * invocation's end will release its unsent picks ({@link #releasedAtEnd}). The mark is kept
     * here rather than as an attribute of its own: each of the invocation's synchronized
     * attribute map operations cost about 8 ns of a 130-ns select, and a mark of its own took
     * two more per invocation. The lock is this word rather than a monitor: taking it is one
     * compare-and-set and releasing it a plain store, where a monitor takes a compare-and-set
     * each way; with three locks per select + release, about 8 ns less of 105. Held only for a
     * few steps over at most {@link #MAX_PENDING} picks, never across a call out, so a thread
     * that finds it taken spins briefly, then yields to a holder that was descheduled.
     */
    private volatile int state;
    private static final int MARKED = 1;
    private static final int LOCKED = 2;
    private static final VarHandle STATE;

    static {
        try {
            STATE = MethodHandles.lookup().findVarHandle(Selections.class, "state", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** Takes the lock; returns the mark ({@link #MARKED} or 0) for {@link #unlock}. */
    private int lock() {
        for (int spins = 0; ; spins++) {
            int s = state;
            if ((s & LOCKED) == 0 && STATE.compareAndSet(this, s, s | LOCKED)) {
                return s;
            }
            if (spins < 64) {
                Thread.onSpinWait();
            } else {
                Thread.yield(); // the holder was descheduled: let it finish
            }
        }
    }

    /** Releases the lock, leaving the invocation marked or not. */
    private void unlock(int mark) {
        STATE.setRelease(this, mark);
    }

    /**
     * Marks an invocation whose end {@link #releaseUnsent} will see (PolylbClusterFilter marks
     * each invocation it wraps); picks of unmarked invocations are undone at once by
     * {@link #record}.
     */
    static Selections releasedAtEnd(Invocation invocation) {
        Selections selections = of(invocation, true);
        selections.mark();
        Current current = CURRENT.get();
        current.invocation = invocation;
        current.selections = selections;
        return selections;
    }

    /**
     * The invocation this thread began last ({@link #releasedAtEnd}) and its Selections, so that
     * its picks and its end find the object without a lookup in the invocation's attributes (a
     * synchronized map; the thread-local read costs less: about 3-4 ns less per select +
     * release). Valid because an invocation's attribute, once created, is never replaced or
     * removed. Cleared when the invocation leaves the thread ({@link #leave}), so that no
     * invocation is held past its call; a nested invocation on the thread only sends the outer
     * one's lookups back to the attributes.
     */
    private static final class Current {
        Invocation invocation;
        Selections selections;
    }

    private static final ThreadLocal<Current> CURRENT = ThreadLocal.withInitial(Current::new);

    /** The thread no longer works on {@code invocation} (its cluster filter returned). */
    static void leave(Invocation invocation) {
        Current current = CURRENT.get();
        if (current.invocation == invocation) {
            current.invocation = null;
            current.selections = null;
        }
    }

    private void mark() {
        lock();
        unlock(MARKED);
    }

    /**
     * Keeps a pick until its invocation sends or releases it. Without PolylbClusterFilter (a
     * reference's {@code filter="-default"} or {@code "-polylb"} drops it, and PolylbInvokerFilter
     * with it) nothing would ever end the pick, and in-flight counts would only grow: the pick is
     * undone at once, so its call goes uncounted, as with Dubbo's leastactive without
     * ActiveLimitFilter (a PolylbInvokerFilter that is there after all counts the call when it
     * is sent).
     */
    static void record(Invocation invocation, Selection selection) {
        Selections selections = current(invocation);
        Selection undone = selections == null ? selection : selections.addIfMarked(selection);
        if (undone != null) {
            cancel(undone);
        }
    }

    /** Records a pick that is sent now (a call Dubbo sent without a select, see PolylbInvokerFilter). */
    static void recordStarted(Invocation invocation, Selection selection) {
        selection.started = true;
        selection.startNanos = System.nanoTime();
        add(invocation, selection);
    }

    private static void add(Invocation invocation, Selection selection) {
        Selection evicted = of(invocation, true).add(selection);
        if (evicted != null) {
            cancel(evicted);
        }
    }

    private static Selections of(Invocation invocation, boolean create) {
        if (!create) {
            Object existing = invocation.get(ATTRIBUTE);
            return existing instanceof Selections ? (Selections) existing : null;
        }
        // Forks may send their first calls at once on several threads: one Selections for all
        // (RpcInvocation's attributes are a synchronized map, so computeIfAbsent is atomic, and
        // one operation on it where a get first would be two once the object exists).
        return (Selections) invocation.getAttributes().computeIfAbsent(ATTRIBUTE, k -> new Selections());
    }

    static Selections of(Invocation invocation) {
        return of(invocation, false);
    }

    /** {@link #of(Invocation)}, from this thread's current invocation when it is that one. */
    static Selections current(Invocation invocation) {
        Current current = CURRENT.get();
        return current.invocation == invocation ? current.selections : of(invocation, false);
    }

    /**
     * Adds a pick of a marked invocation. Returns the pick to undo: an older one evicted, the
     * pick itself when the invocation is not marked (no end will release it), or null.
     */
    private Selection addIfMarked(Selection selection) {
        int mark = lock();
        try {
            return mark == MARKED ? append(selection) : selection;
        } finally {
            unlock(mark);
        }
    }

    private Selection add(Selection selection) {
        int mark = lock();
        try {
            return append(selection);
        } finally {
            unlock(mark);
        }
    }

    /** Adds a pick; returns the oldest one evicted to make room, or null. Holds the lock. */
    private Selection append(Selection selection) {
        Selection evicted = null;
        if (size >= MAX_PENDING) {
            evicted = removeFirst(false, null);
        }
        selection.next = null;
        if (oldest == null) {
            oldest = selection;
        } else {
            Selection last = oldest;
            while (last.next != null) {
                last = last.next;
            }
            last.next = selection;
        }
        size++;
        return evicted;
    }

    /**
     * Unlinks and returns the oldest pick that is sent (or not) and, unless {@code url} is null,
     * for that provider (the closest match, see {@link #match}); null when there is none. Holds
     * the lock.
     */
    private Selection removeFirst(boolean started, URL url) {
        Selection found = null;
        Selection foundBefore = null;
        int best = 0;
        Selection before = null;
        for (Selection s = oldest; s != null; before = s, s = s.next) {
            if (s.started != started) {
                continue;
            }
            int level = url == null ? SAME_OBJECT : match(s.url, url);
            if (level > best) {
                best = level;
                found = s;
                foundBefore = before;
                if (level == SAME_OBJECT) {
                    break;
                }
            }
        }
        if (found != null) {
            if (foundBefore == null) {
                oldest = found.next;
            } else {
                foundBefore.next = found.next;
            }
            found.next = null;
            size--;
        }
        return found;
    }

    /** Marks the newest unsent pick for the provider at {@code url} (the closest match) as sent now. */
    Selection start(URL url) {
        int mark = lock();
        try {
            Selection newest = null;
            int best = 0;
            for (Selection s = oldest; s != null; s = s.next) {
                if (!s.started) {
                    int level = match(s.url, url);
                    if (level > 0 && level >= best) {
                        best = level;
                        newest = s;
                    }
                }
            }
            if (newest != null) {
                newest.started = true;
                newest.startNanos = System.nanoTime();
            }
            return newest;
        } finally {
            unlock(mark);
        }
    }

    /** Removes and returns the sent pick for the provider at {@code url}. */
    Selection finish(URL url) {
        int mark = lock();
        try {
            return removeFirst(true, url);
        } finally {
            unlock(mark);
        }
    }

    /**
     * Unmarks the invocation, removes the picks that were never sent and returns them linked
     * through {@code next}, oldest first (null: none).
     */
    Selection unmarkAndDrainUnsent() {
        lock();
        try {
            return drainUnsent();
        } finally {
            unlock(0);
        }
    }

    /** The body of {@link #unmarkAndDrainUnsent}. Holds the lock. */
    private Selection drainUnsent() {
        Selection unsentOldest = null;
        Selection unsentLast = null;
        Selection before = null;
        Selection s = oldest;
        while (s != null) {
            Selection following = s.next;
            if (s.started) {
                before = s;
            } else {
                if (before == null) {
                    oldest = following;
                } else {
                    before.next = following;
                }
                size--;
                s.next = null;
                if (unsentLast == null) {
                    unsentOldest = s;
                } else {
                    unsentLast.next = s;
                }
                unsentLast = s;
            }
            s = following;
        }
        return unsentOldest;
    }

    private static final int SAME_OBJECT = 3;
    private static final int SAME_SERVICE = 2;
    private static final int SAME_ADDRESS = 1;

    /**
     * How closely the provider a filter invoked matches one the balancer picked, 0 = not at all.
     * The invoker a filter sees is the protocol's (inside the filter chain), the one the balancer
     * picked is the directory's wrapper: they share the URL object, or the protocol, address and
     * path, or at least the address. Two providers can share an address (Dubbo 3 serves
     * {@code dubbo://} and {@code tri://} on one port): a call is matched to the closest pick, so
     * that forked calls to both are each charged to their own.
     */
    private static int match(URL picked, URL invoked) {
        if (picked == invoked) {
            return SAME_OBJECT;
        }
        if (picked == null || invoked == null || !Objects.equals(picked.getAddress(), invoked.getAddress())) {
            return 0;
        }
        boolean sameService = Objects.equals(picked.getProtocol(), invoked.getProtocol())
                && Objects.equals(picked.getPath(), invoked.getPath());
        return sameService ? SAME_SERVICE : SAME_ADDRESS;
    }

    static void cancel(Selection s) {
        try {
            s.balancer.report(s.method, s.id, 0, Outcome.CANCELLED);
        } catch (RuntimeException ignored) {
            // The balancer was closed (application shutdown): nothing left to undo.
        }
    }

    /**
     * Releases every unsent pick of an invocation (what PolylbClusterFilter does when it ends),
     * and unmarks it: a later select with it (failback's retry timer) has no end to wait for.
     */
    static void releaseUnsent(Invocation invocation) {
        Current current = CURRENT.get();
        Selections selections;
        if (current.invocation == invocation) {
            selections = current.selections;
            current.invocation = null;
            current.selections = null;
        } else {
            selections = of(invocation, false);
        }
        if (selections != null) {
            selections.releaseUnsent();
        }
    }

    /** {@link #releaseUnsent(Invocation)} of this object's invocation. */
    void releaseUnsent() {
        Selection s = unmarkAndDrainUnsent();
        while (s != null) {
            Selection following = s.next; // drained: no other thread links through it now
            cancel(s);
            s = following;
        }
    }
}
