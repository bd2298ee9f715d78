package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.CallTest.Totals;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** Balancer.callAsync: the call is in flight until the body's stage completes, then judged once. */
class AsyncCallTest {
    private static List<Invoker> invokers(int n) {
        List<Invoker> list = new ArrayList<>();
        for (int i = 1; i <= n; i++) {
            list.add(Invoker.of(i, "10.0.0." + i + ":20880"));
        }
        return list;
    }

    @Test
    void inFlightUntilTheStageCompletesThenASuccessWithItsTime() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=shortestresponse")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            CompletableFuture<String> answer = new CompletableFuture<>();
            long[] seen = {-1};
            CompletableFuture<String> reply = lb.callAsync(m, null, id -> {
                seen[0] = id;
                return answer;
            });
            assertTrue(seen[0] == 1 || seen[0] == 2);
            assertEquals(1, Totals.of(lb).active());
            Thread.sleep(20);
            assertFalse(reply.isDone());
            AtomicLong activeSeenByDependents = new AtomicLong(-1);
            reply.whenComplete((value, thrown) -> activeSeenByDependents.set(Totals.of(lb).active()));
            Thread completer = new Thread(() -> answer.complete("hello from " + seen[0]));
            completer.start();
            assertEquals("hello from " + seen[0], reply.get(10, TimeUnit.SECONDS));
            completer.join();
            assertEquals(0, activeSeenByDependents.get(), "reported before the returned future completed");
            Totals totals = Totals.of(lb);
            assertEquals(new Totals(0, 1, 1, 0, 0, totals.meanSuccessUs()), totals);
            long mean = totals.meanSuccessUs();
            assertTrue(mean >= 20_000 && mean < 5_000_000, "mean success latency " + mean + " us");
        }
    }

    @Test
    void anExceptionalCompletionIsJudgedByItsException() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            ExecutorService pool = Executors.newSingleThreadExecutor();
            try {
                IOException reset = new IOException("connection reset");
                CompletableFuture<String> failed = lb.callAsync(m, null,
                        id -> CompletableFuture.supplyAsync(() -> {
                            throw new CompletionException(reset);
                        }, pool));
                ExecutionException thrown = assertThrows(ExecutionException.class, () -> failed.get(10, TimeUnit.SECONDS));
                assertSame(reset, thrown.getCause(), "the stage's exception reaches the caller unchanged");
                assertEquals(new Totals(0, 1, 0, 1, 0, 0), Totals.of(lb));

                // orTimeout completes the stage with a TimeoutException on a timer thread.
                CompletableFuture<String> late = lb.callAsync(m, null,
                        id -> new CompletableFuture<String>().orTimeout(10, TimeUnit.MILLISECONDS));
                thrown = assertThrows(ExecutionException.class, () -> late.get(10, TimeUnit.SECONDS));
                assertTrue(thrown.getCause() instanceof TimeoutException, String.valueOf(thrown.getCause()));
                assertEquals(new Totals(0, 2, 0, 2, 1, 0), Totals.of(lb));

                // A stage cancelled by whoever holds it: no verdict on the provider.
                CompletableFuture<String> pending = new CompletableFuture<>();
                CompletableFuture<String> abandoned = lb.callAsync(m, null, id -> pending);
                pending.cancel(false);
                assertThrows(CancellationException.class, () -> abandoned.get(10, TimeUnit.SECONDS));
                assertEquals(new Totals(0, 3, 0, 2, 1, 0), Totals.of(lb));
            } finally {
                pool.shutdown();
            }
        }
    }

    @Test
    void cancellingTheReturnedFutureCancelsTheStageAndReportsCancelled() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            CompletableFuture<String> stage = new CompletableFuture<>();
            CompletableFuture<String> reply = lb.callAsync(m, null, id -> stage);
            assertEquals(1, Totals.of(lb).active());
            AtomicLong activeSeenByDependents = new AtomicLong(-1);
            reply.whenComplete((value, thrown) -> activeSeenByDependents.set(Totals.of(lb).active()));
            assertTrue(reply.cancel(true));
            assertTrue(stage.isCancelled(), "the body's stage is cancelled with it");
            assertEquals(0, activeSeenByDependents.get(), "reported before the dependents ran");
            assertEquals(new Totals(0, 1, 0, 0, 0, 0), Totals.of(lb));

            // A minimal stage's toCompletableFuture() is a copy: cancelling it leaves the source
            // running, but the caller gave the call up, and its later answer changes nothing.
            CompletableFuture<String> source = new CompletableFuture<>();
            CompletionStage<String> minimal = source.minimalCompletionStage();
            CompletableFuture<String> view = lb.callAsync(m, null, id -> minimal);
            assertTrue(view.cancel(false));
            assertFalse(source.isDone());
            assertEquals(new Totals(0, 2, 0, 0, 0, 0), Totals.of(lb));
            source.complete("late");
            assertTrue(view.isCancelled());
            assertEquals(new Totals(0, 2, 0, 0, 0, 0), Totals.of(lb));
        }
    }

    /** A caller that stops waiting (its own timeout, a fallback) ends the call then. */
    @Test
    void completingTheReturnedFutureFromOutsideEndsTheCall() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");

            CompletableFuture<String> hung = new CompletableFuture<>();
            CompletableFuture<String> reply = lb.callAsync(m, null, id -> hung).orTimeout(20, TimeUnit.MILLISECONDS);
            AtomicLong activeSeenByDependents = new AtomicLong(-1);
            CompletableFuture<String> dependent = reply.whenComplete(
                    (value, thrown) -> activeSeenByDependents.set(Totals.of(lb).active()));
            ExecutionException late = assertThrows(ExecutionException.class, () -> dependent.get(10, TimeUnit.SECONDS));
            assertTrue(late.getCause() instanceof TimeoutException, String.valueOf(late.getCause()));
            assertEquals(0, activeSeenByDependents.get(), "reported before the dependents ran");
            // The timer thread that timed `reply` out cancels the stage after completing `reply`
            // and running its dependents (CallFuture.abandonStageIf): wait for that cancel, the
            // dependent's completion having woken this thread before it.
            assertThrows(CancellationException.class, () -> hung.get(10, TimeUnit.SECONDS),
                    "the stage nobody waits for is cancelled");
            Totals totals = Totals.of(lb);
            assertEquals(new Totals(0, 1, 0, 1, 1, 0), totals, "the caller's timeout is the call's timeout");

            CompletableFuture<String> slow = new CompletableFuture<>();
            CompletableFuture<String> fallback = lb.callAsync(m, null, id -> slow);
            assertTrue(fallback.complete("cached"));
            assertEquals("cached", fallback.join());
            assertTrue(slow.isCancelled());
            slow.obtrudeValue("too late"); // a stage completing after all changes nothing
            assertEquals(new Totals(0, 2, 0, 1, 1, 0), Totals.of(lb), "a fallback is no verdict");

            CompletableFuture<String> pending = new CompletableFuture<>();
            CompletableFuture<String> failed = lb.callAsync(m, null, id -> pending);
            assertThrows(NullPointerException.class, () -> failed.completeExceptionally(null));
            assertEquals(1, Totals.of(lb).active(), "a rejected completion ends nothing");
            assertTrue(failed.completeExceptionally(new IOException("circuit open")));
            assertEquals(new Totals(0, 3, 0, 2, 1, 0), Totals.of(lb));

            // Once the stage has answered, completing the returned future changes nothing.
            CompletableFuture<String> answered = lb.callAsync(m, null, id -> CompletableFuture.completedFuture("hi"));
            assertFalse(answered.complete("other"));
            assertFalse(answered.cancel(false));
            assertEquals("hi", answered.thenApply(String::toUpperCase).join().toLowerCase());
            assertEquals(new Totals(0, 4, 1, 2, 1, Totals.of(lb).meanSuccessUs()), Totals.of(lb));
        }
    }

    /**
     * The JDK's other ways to complete a future from outside ({@code completeAsync}, the
     * {@code obtrude} pair) end the call as {@code complete} does; before, they bypassed it and
     * the call stayed in flight, its stage running on.
     */
    @Test
    void completingTheReturnedFutureThroughTheJdksOtherEntriesEndsTheCallToo() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            CompletableFuture<String> slow = new CompletableFuture<>();
            CompletableFuture<String> reply = lb.callAsync(m, null, id -> slow);
            reply.completeAsync(() -> "fallback");
            assertEquals("fallback", reply.get(10, TimeUnit.SECONDS));
            assertThrows(CancellationException.class, () -> slow.get(10, TimeUnit.SECONDS));
            assertEquals(new Totals(0, 1, 0, 0, 0, 0), Totals.of(lb), "a fallback is no verdict");

            CompletableFuture<String> failing = lb.callAsync(m, null, id -> new CompletableFuture<>());
            failing.completeAsync(() -> {
                throw new IllegalStateException("no fallback");
            });
            ExecutionException thrown = assertThrows(ExecutionException.class, () -> failing.get(10, TimeUnit.SECONDS));
            assertTrue(thrown.getCause() instanceof IllegalStateException, String.valueOf(thrown.getCause()));
            assertEquals(new Totals(0, 2, 0, 1, 0, 0), Totals.of(lb));

            CompletableFuture<String> forced = lb.callAsync(m, null, id -> new CompletableFuture<>());
            forced.obtrudeValue("forced");
            assertEquals("forced", forced.join());
            CompletableFuture<String> forcedFailure = lb.callAsync(m, null, id -> new CompletableFuture<>());
            forcedFailure.obtrudeException(new TimeoutException("deadline"));
            assertThrows(ExecutionException.class, () -> forcedFailure.get(10, TimeUnit.SECONDS));
            assertEquals(new Totals(0, 4, 0, 2, 1, 0), Totals.of(lb));
        }
    }

    /**
     * Outcomes by exception: an asynchronous channel's timeout is a TIMEOUT (before: a failure);
     * a cause chain that loops is judged, not followed for ever (before, the reporting thread
     * spun and the call stayed in flight).
     */
    @Test
    void outcomesOfChannelTimeoutsAndCausesThatLoop() {
        assertEquals(Outcome.TIMEOUT, Balancer.outcomeOf(new java.nio.channels.InterruptedByTimeoutException(), false));
        CompletionException inner = new CompletionException("inner") { };
        ExecutionException outer = new ExecutionException(inner);
        inner.initCause(outer);
        assertEquals(Outcome.FAILURE, Balancer.outcomeOf(outer, false));
    }

    /** Only the completing thread was interrupted: that is no verdict on this call. */
    @Test
    void theCompletingThreadsInterruptIsNotTheCallsCancel() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            CompletableFuture<String> stage = new CompletableFuture<>();
            CompletableFuture<String> reply = lb.callAsync(m, null, id -> stage);
            Thread completer = new Thread(() -> {
                Thread.currentThread().interrupt();
                stage.completeExceptionally(new IOException("connection refused"));
            });
            completer.start();
            completer.join();
            assertThrows(ExecutionException.class, () -> reply.get(10, TimeUnit.SECONDS));
            assertEquals(new Totals(0, 1, 0, 1, 0, 0), Totals.of(lb));
        }
    }

    @Test
    void aBodyThatThrowsIsReportedAndItsExceptionRethrown() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            java.net.ConnectException refused = new java.net.ConnectException("refused");
            java.net.ConnectException thrown = assertThrows(java.net.ConnectException.class,
                    () -> lb.<String, java.net.ConnectException>callAsync(m, null, id -> {
                        throw refused;
                    }));
            assertSame(refused, thrown);
            assertEquals(new Totals(0, 1, 0, 1, 0, 0), Totals.of(lb));

            NullPointerException noStage = assertThrows(NullPointerException.class,
                    () -> lb.callAsync(m, null, id -> null));
            assertTrue(noStage.getMessage().contains("CompletionStage"), noStage.getMessage());
            assertEquals(new Totals(0, 2, 0, 1, 0, 0), Totals.of(lb), "no stage: cancelled, no verdict");
        }
    }

    @Test
    void selectingFailsBeforeTheBodyRunsAndRetriesExclude() throws Exception {
        try (Balancer empty = new Balancer("loadbalance=random")) {
            PolylbException noProvider = assertThrows(PolylbException.class,
                    () -> empty.callAsync(0, null, id -> {
                        throw new AssertionError("never runs: there is no provider");
                    }));
            assertEquals(Status.NO_PROVIDER, noProvider.status());
        }
        try (Balancer lb = new Balancer("loadbalance=random")) {
            lb.update(invokers(3));
            for (int i = 0; i < 50; i++) {
                long picked = lb.callAmongAsync(0, null, new long[] {1, 3}, new long[] {1},
                        id -> CompletableFuture.completedFuture(id)).get();
                assertEquals(3, picked);
            }
            assertEquals(new Totals(0, 50, 50, 0, 0, Totals.of(lb).meanSuccessUs()), Totals.of(lb));
        }
    }

    /** A call outliving its balancer still delivers its answer; the report goes nowhere. */
    @Test
    void aStageCompletingAfterTheBalancerClosedStillCompletes() throws Exception {
        Balancer lb = new Balancer("loadbalance=leastactive");
        lb.update(invokers(2));
        CompletableFuture<String> ok = new CompletableFuture<>();
        CompletableFuture<String> failing = new CompletableFuture<>();
        CompletableFuture<String> first = lb.callAsync(0, null, id -> ok);
        CompletableFuture<String> second = lb.callAsync(0, null, id -> failing);
        lb.close();
        ok.complete("answer");
        IOException own = new IOException("reset");
        failing.completeExceptionally(own);
        assertEquals("answer", first.get(10, TimeUnit.SECONDS));
        assertSame(own, assertThrows(ExecutionException.class, () -> second.get(10, TimeUnit.SECONDS)).getCause());
    }

    /** Many calls completing on other threads while the set changes: none stays in flight. */
    @Test
    void concurrentAsyncCallsLeaveNothingInFlight() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(4));
            int m = lb.method("m");
            ExecutorService pool = Executors.newFixedThreadPool(4);
            try {
                List<CompletableFuture<Integer>> replies = new ArrayList<>();
                for (int i = 0; i < 20_000; i++) {
                    int kind = i % 3;
                    replies.add(lb.callAsync(m, null, id -> CompletableFuture.supplyAsync(() -> {
                        if (kind == 1) {
                            throw new IllegalStateException("provider failed");
                        }
                        return kind;
                    }, pool)));
                    if (i % 1000 == 0) { // weights change; no invoker leaves, so no count hides
                        List<Invoker> set = invokers(4);
                        set.set(0, set.get(0).withWeight(100 + i / 1000));
                        lb.update(set);
                    }
                }
                int failed = 0;
                for (CompletableFuture<Integer> reply : replies) {
                    try {
                        reply.get(60, TimeUnit.SECONDS);
                    } catch (ExecutionException expected) {
                        failed++;
                    }
                }
                assertEquals(20_000 / 3 + (20_000 % 3 > 1 ? 1 : 0), failed);
            } finally {
                pool.shutdown();
            }
            assertEquals(0, Totals.of(lb).active(), lb.statsJson());
        }
    }
}
