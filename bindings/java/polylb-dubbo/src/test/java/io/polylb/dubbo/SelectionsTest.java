package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import com.google.gson.JsonElement;
import com.google.gson.JsonParser;
import io.polylb.Balancer;
import io.polylb.Invoker;
import io.polylb.Outcome;
import java.util.List;
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
}
