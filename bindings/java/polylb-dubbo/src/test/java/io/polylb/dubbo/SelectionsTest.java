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
import org.junit.jupiter.api.Test;

/** The bookkeeping between a pick, the attempt that sends it and the end of the invocation. */
class SelectionsTest {
    private static final URL A = URL.valueOf("dubbo://10.0.0.1:20880/S");
    private static final URL A_AGAIN = URL.valueOf("dubbo://10.0.0.1:20880/S?side=consumer");
    private static final URL B = URL.valueOf("dubbo://10.0.0.2:20880/S");

    /** A balancer over ids 1 and 2, and the calls each holds in flight. */
    private static Balancer balancer() {
        Balancer lb = new Balancer("loadbalance=leastactive");
        lb.update(List.of(Invoker.of(1, "10.0.0.1:20880"), Invoker.of(2, "10.0.0.2:20880")));
        return lb;
    }

    private static int inFlight(Balancer lb) {
        int active = 0;
        for (JsonElement m : JsonParser.parseString(lb.statsJson()).getAsJsonObject().getAsJsonArray("invokers")) {
            active += m.getAsJsonObject().get("active").getAsInt();
        }
        return active;
    }

    private static Selections.Selection pick(Balancer lb, int method, long id, URL url, RpcInvocation inv) {
        assertEquals(id, lb.selectAmong(method, null, new long[] {id}, null));
        Selections.Selection s = new Selections.Selection(lb, method, id, url, false);
        Selections.record(inv, s);
        return s;
    }

    @Test
    void theSentPickIsClaimedAndTheOthersAreReleased() {
        try (Balancer lb = balancer()) {
            int m = lb.method("m");
            RpcInvocation inv = TestInvokers.call("m");
            Selections.Selection first = pick(lb, m, 1, A, inv);
            Selections.Selection reselected = pick(lb, m, 1, A, inv);
            Selections.Selection other = pick(lb, m, 2, B, inv);
            assertEquals(3, inFlight(lb));

            Selections selections = Selections.of(inv);
            // The attempt on A's provider (seen through another URL object) sends the newest pick.
            assertSame(reselected, selections.start(A_AGAIN));
            assertNull(selections.finish(B), "B's pick was never sent");
            assertSame(reselected, selections.finish(A));
            assertNull(selections.finish(A), "finished once");
            lb.report(m, reselected.id, 10, Outcome.SUCCESS);
            assertEquals(2, inFlight(lb));

            Selections.releaseUnsent(inv);
            assertEquals(0, inFlight(lb), "first and other released");
            assertNull(selections.start(A), "nothing left to send");
            assertNull(selections.start(B));
            Selections.releaseUnsent(inv);
            assertEquals(0, inFlight(lb));
            assertEquals(1, first.id);
            assertEquals(2, other.id);
        }
    }

    @Test
    void aStartedPickOutlivesTheRelease() {
        try (Balancer lb = balancer()) {
            int m = lb.method("m");
            RpcInvocation inv = TestInvokers.call("m");
            Selections.Selection sent = pick(lb, m, 2, B, inv);
            pick(lb, m, 1, A, inv);
            Selections selections = Selections.of(inv);
            assertSame(sent, selections.start(B));
            Selections.releaseUnsent(inv);
            assertEquals(1, inFlight(lb), "only the unsent pick is released");
            assertSame(sent, selections.finish(B));
        }
    }

    @Test
    void anInvocationNeverEndedHoldsAtMostMaxPendingPicks() {
        try (Balancer lb = balancer()) {
            int m = lb.method("m");
            RpcInvocation inv = TestInvokers.call("m");
            Selections.Selection sent = pick(lb, m, 2, B, inv);
            Selections.of(inv).start(B);
            for (int i = 0; i < 3 * Selections.MAX_PENDING; i++) {
                pick(lb, m, 1, A, inv);
            }
            // The sent pick is never evicted; the oldest unsent ones are, down to MAX_PENDING.
            assertEquals(Selections.MAX_PENDING, inFlight(lb));
            Selections.releaseUnsent(inv);
            assertEquals(1, inFlight(lb));
            assertSame(sent, Selections.of(inv).finish(B));
        }
    }
}
