package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonParser;
import io.polylb.Balancer;
import io.polylb.Invoker;
import io.polylb.Outcome;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.RpcInvocation;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The bookkeeping between a pick, the attempt that sends it and the end of the invocation. */
class SelectionsTest {
    private static final URL A = URL.valueOf("dubbo://10.0.0.1:20880/S");
    private static final URL A_AGAIN = URL.valueOf("dubbo://10.0.0.1:20880/S?side=consumer");
    private static final URL B = URL.valueOf("dubbo://10.0.0.2:20880/S");

    /** A balancer over ids 1 and 2, a method and one invocation, fresh for each test. */
    private Balancer lb;
    private int m;
    private RpcInvocation inv;

    @BeforeEach
    void setUp() {
        lb = new Balancer("loadbalance=leastactive");
        lb.update(List.of(Invoker.of(1, "10.0.0.1:20880"), Invoker.of(2, "10.0.0.2:20880")));
        m = lb.method("m");
        inv = TestInvokers.call("m");
        Selections.releasedAtEnd(inv);
    }

    @AfterEach
    void tearDown() {
        lb.close();
    }

    /** Calls the balancer holds in flight, summed over its invokers. */
    private int inFlight() {
        int active = 0;
        for (JsonElement e : JsonParser.parseString(lb.statsJson()).getAsJsonObject().getAsJsonArray("invokers")) {
            active += e.getAsJsonObject().get("active").getAsInt();
        }
        return active;
    }

    /** Selects {@code id} (the only candidate) and records the pick as the adapter does. */
    private Selections.Selection pick(long id, URL url) {
        assertEquals(id, lb.selectAmong(m, null, new long[] {id}, null));
        Selections.Selection s = new Selections.Selection(lb, m, id, url, false);
        Selections.record(inv, s);
        return s;
    }

    @Test
    void theSentPickIsClaimedAndTheOthersAreReleased() {
        Selections.Selection first = pick(1, A);
        Selections.Selection reselected = pick(1, A);
        Selections.Selection other = pick(2, B);
        assertEquals(3, inFlight());

        Selections selections = Selections.of(inv);
        // The attempt on A's provider (seen through another URL object) sends the newest pick.
        assertSame(reselected, selections.start(A_AGAIN));
        assertNull(selections.finish(B), "B's pick was never sent");
        assertSame(reselected, selections.finish(A));
        assertNull(selections.finish(A), "finished once");
        lb.report(m, reselected.id, 10, Outcome.SUCCESS);
        assertEquals(2, inFlight());

        Selections.releaseUnsent(inv);
        assertEquals(0, inFlight(), "first and other released");
        assertNull(selections.start(A), "nothing left to send");
        assertNull(selections.start(B));
        Selections.releaseUnsent(inv);
        assertEquals(0, inFlight());
        assertEquals(1, first.id);
        assertEquals(2, other.id);
    }

    @Test
    void aStartedPickOutlivesTheRelease() {
        Selections.Selection sent = pick(2, B);
        pick(1, A);
        Selections selections = Selections.of(inv);
        assertSame(sent, selections.start(B));
        Selections.releaseUnsent(inv);
        assertEquals(1, inFlight(), "only the unsent pick is released");
        assertSame(sent, selections.finish(B));
    }

    @Test
    void anInvocationNeverEndedHoldsAtMostMaxPendingPicks() {
        Selections.Selection sent = pick(2, B);
        Selections.of(inv).start(B);
        for (int i = 0; i < 3 * Selections.MAX_PENDING; i++) {
            pick(1, A);
        }
        // The sent pick is never evicted; the oldest unsent ones are, down to MAX_PENDING.
        assertEquals(Selections.MAX_PENDING, inFlight());
        Selections.releaseUnsent(inv);
        assertEquals(1, inFlight());
        assertSame(sent, Selections.of(inv).finish(B));
    }

    @Test
    void anInvocationBegunElsewhereIsFoundThroughItsAttributes() throws Exception {
        // inv was begun on this thread (its current invocation): a pick for an invocation
        // never begun is still undone at once, not kept with inv's.
        RpcInvocation neverBegun = TestInvokers.call("m");
        assertEquals(1, lb.selectAmong(m, null, new long[] {1}, null));
        Selections.record(neverBegun, new Selections.Selection(lb, m, 1, A, false));
        assertEquals(0, inFlight());
        // Another invocation begun and ended on this thread since (a nested call) leaves inv's
        // picks to be found through its attributes, still marked.
        RpcInvocation nested = TestInvokers.call("m");
        Selections.releasedAtEnd(nested);
        Selections.releaseUnsent(nested);
        pick(1, A);
        // A thread that never began inv records a pick for it, kept for inv's end as well.
        Thread other = new Thread(() -> pick(2, B));
        other.start();
        other.join();
        assertEquals(2, inFlight(), "both picks kept for the end");
        Selections.releaseUnsent(inv);
        assertEquals(0, inFlight());
        // Ended: a later pick (failback's timer) is undone at once, on this thread or not.
        pick(1, A);
        assertEquals(0, inFlight());
    }

    @Test
    void threadsSharingAnInvocationLoseNoPick() throws Exception {
        // Forks record, send and finish picks of one invocation on several threads at once;
        // every pick must be reported once: sent ones by their finish, the others by eviction
        // or the end.
        int threads = 4;
        int picksEach = 5_000;
        CyclicBarrier start = new CyclicBarrier(threads);
        List<Thread> forks = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            long id = 1 + (t & 1);
            URL url = id == 1 ? A : B;
            Thread fork = new Thread(() -> {
                try {
                    start.await();
                    for (int i = 0; i < picksEach; i++) {
                        pick(id, url);
                        if (i % 3 != 0) {
                            Selections selections = Selections.of(inv);
                            Selections.Selection sent = selections.start(url);
                            if (sent != null) {
                                Selections.Selection done = selections.finish(url);
                                assertTrue(done != null, "a started pick is there to finish");
                                lb.report(m, done.id, 1, Outcome.SUCCESS);
                            }
                        }
                    }
                } catch (Throwable e) {
                    synchronized (failures) {
                        failures.add(e);
                    }
                }
            });
            forks.add(fork);
            fork.start();
        }
        for (Thread fork : forks) {
            fork.join();
        }
        assertEquals(List.of(), failures);
        Selections.releaseUnsent(inv);
        assertEquals(0, inFlight(), "every pick reported");
    }
}
