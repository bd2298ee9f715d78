package io.polylb.spring;

import io.polylb.Balancer;
import io.polylb.Outcome;
import io.polylb.PolylbException;
import java.util.ArrayDeque;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The requests under way, each counted in flight by polylb from Spring's {@code onStartRequest}
 * to its {@code onComplete}. A request is found again by the identity of Spring's
 * {@code Request} object and the instance's id: Spring passes the same object to both
 * callbacks. The instance is named by its key, not its id, so a request that outlives its
 * instance's stay in the list still ends (its report to the departed id is ignored). Whoever takes a lease out of the map reports it, so each is reported exactly once,
 * by its completion or, when none comes (a WebClient exchange cancelled by its subscriber:
 * Spring calls no lifecycle method then), by the sweep once it is older than the lease timeout.
 */
final class InFlight {
    private record Key(Object request, String instance) {
        @Override
        public boolean equals(Object o) {
            return o instanceof Key k && k.request == request && k.instance.equals(instance);
        }

        @Override
        public int hashCode() {
            return System.identityHashCode(request) * 31 + instance.hashCode();
        }
    }

    private record Lease(long id, long startNanos) {}

    private final Balancer balancer;
    private final long timeoutNanos;
    private final long sweepEveryNanos;
    // A request object shared by concurrent calls (user code reusing one) queues its leases: the
    // oldest is ended first, and any of them ends the same instance's count.
    private final Map<Key, ArrayDeque<Lease>> leases = new ConcurrentHashMap<>();
    private final AtomicInteger open = new AtomicInteger();
    private final AtomicLong nextSweep = new AtomicLong(System.nanoTime());

    InFlight(Balancer balancer, long timeoutNanos) {
        this.balancer = balancer;
        this.timeoutNanos = timeoutNanos;
        this.sweepEveryNanos = Math.max(1_000_000L, Math.min(timeoutNanos / 4, 1_000_000_000L));
    }

    /** Counts the request to instance {@code id} in flight; false if the id has left the set. */
    boolean start(Object request, String instance, long id) {
        sweepIfDue();
        try {
            // A pick restricted to this one instance: it is the call-in-flight count for it.
            balancer.selectAmong(Balancer.SERVICE_METHOD, null, new long[] {id}, null);
        } catch (PolylbException | IllegalStateException gone) {
            return false; // left the set (or the client closed) since it was chosen: nothing to count
        }
        Lease lease = new Lease(id, System.nanoTime());
        leases.compute(new Key(request, instance), (k, q) -> {
            ArrayDeque<Lease> queue = q == null ? new ArrayDeque<>(1) : q;
            queue.addLast(lease);
            return queue;
        });
        open.incrementAndGet();
        return true;
    }

    /** Ends the oldest lease of this request and instance; false if there is none. */
    boolean complete(Object request, String instance, Outcome outcome) {
        Lease[] taken = new Lease[1];
        leases.computeIfPresent(new Key(request, instance), (k, q) -> {
            taken[0] = q.pollFirst();
            return q.isEmpty() ? null : q;
        });
        if (taken[0] == null) {
            return false;
        }
        report(taken[0], outcome);
        return true;
    }

    void sweepIfDue() {
        long now = System.nanoTime();
        long due = nextSweep.get();
        if (now - due >= 0 && nextSweep.compareAndSet(due, now + sweepEveryNanos)) {
            cancelStartedBefore(now - timeoutNanos);
        }
    }

    /** Reports {@code CANCELLED} for every lease started at or before {@code cutoffNanos} (System.nanoTime). */
    void cancelStartedBefore(long cutoffNanos) {
        for (Key key : leases.keySet()) {
            while (true) {
                Lease[] taken = new Lease[1];
                leases.computeIfPresent(key, (k, q) -> {
                    Lease oldest = q.peekFirst();
                    if (oldest != null && oldest.startNanos() - cutoffNanos <= 0) {
                        taken[0] = q.pollFirst();
                    }
                    return q.isEmpty() ? null : q;
                });
                if (taken[0] == null) {
                    break;
                }
                report(taken[0], Outcome.CANCELLED);
            }
        }
    }

    int open() {
        return open.get();
    }

    private void report(Lease lease, Outcome outcome) {
        open.decrementAndGet();
        long elapsedUs = Math.max(0, (System.nanoTime() - lease.startNanos()) / 1000);
        try {
            balancer.report(Balancer.SERVICE_METHOD, lease.id(), elapsedUs, outcome);
        } catch (IllegalStateException closed) {
            // the client's context closed: its balancer's counts went with it
        }
    }
}
