package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** Balancer.Call: one select, exactly one report, CANCELLED when it ends unfinished. */
class CallTest {
    private static List<Invoker> invokers(int n) {
        List<Invoker> list = new ArrayList<>();
        for (int i = 1; i <= n; i++) {
            list.add(Invoker.of(i, "10.0.0." + i + ":20880"));
        }
        return list;
    }

    /** The set's counters summed over invokers (each invoker's own row, not its per-method rows). */
    record Totals(long active, long selected, long succeeded, long failures, long timeouts, long meanSuccessUs) {
        static Totals of(Balancer lb) {
            String json = lb.statsJson();
            Matcher m = Pattern.compile("\\{\"id\":\\d+,.*?\"active\":(\\d+),\"selected\":(\\d+),\"succeeded\":(\\d+),"
                    + "\"failures\":(\\d+),\"timeouts\":(\\d+),\"mean_success_us\":(\\d+)").matcher(json);
            long[] sums = new long[6];
            int rows = 0;
            while (m.find()) {
                rows++;
                for (int i = 0; i < 6; i++) {
                    long v = Long.parseLong(m.group(i + 1));
                    sums[i] = i == 5 ? Math.max(sums[i], v) : sums[i] + v;
                }
            }
            assertTrue(rows > 0, json);
            return new Totals(sums[0], sums[1], sums[2], sums[3], sums[4], sums[5]);
        }
    }

    @Test
    void inFlightWhileOpenAndNoneAfter() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            try (Balancer.Call call = lb.call(m)) {
                assertEquals(1, Totals.of(lb).active());
                try (Balancer.Call second = lb.call(m, new byte[] {1})) {
                    assertEquals(2, Totals.of(lb).active());
                    second.finish(Outcome.SUCCESS);
                }
                assertEquals(1, Totals.of(lb).active());
                call.finish(Outcome.SUCCESS);
                assertEquals(0, Totals.of(lb).active());
            }
            assertEquals(new Totals(0, 2, 2, 0, 0, Totals.of(lb).meanSuccessUs()), Totals.of(lb));
        }
    }

    @Test
    void onlyTheFirstFinishReports() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            try (Balancer.Call call = lb.call(m)) {
                call.finish(Outcome.SUCCESS);
                Totals once = Totals.of(lb);
                assertEquals(1, once.succeeded());
                call.finish(Outcome.SUCCESS);
                call.finish(Outcome.FAILURE);
                call.close();
                assertEquals(once, Totals.of(lb));
            }
            assertEquals(new Totals(0, 1, 1, 0, 0, Totals.of(lb).meanSuccessUs()), Totals.of(lb));
        }
    }

    @Test
    void closedUnfinishedIsCancelled() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            try (Balancer.Call call = lb.call(m)) {
                assertTrue(call.id() == 1 || call.id() == 2);
            }
            assertEquals(new Totals(0, 1, 0, 0, 0, 0), Totals.of(lb));
        }
    }

    @Test
    void anExceptionInTheBodyCancelsAndPropagatesUnchanged() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            IllegalArgumentException boom = new IllegalArgumentException("boom");
            IllegalArgumentException thrown = assertThrows(IllegalArgumentException.class, () -> {
                try (Balancer.Call call = lb.call(m)) {
                    assertEquals(1, Totals.of(lb).active());
                    throw boom;
                }
            });
            assertSame(boom, thrown);
            assertEquals(0, thrown.getSuppressed().length);
            assertEquals(new Totals(0, 1, 0, 0, 0, 0), Totals.of(lb));
        }
    }

    @Test
    void aNullOutcomeLeavesTheCallToClose() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            try (Balancer.Call call = lb.call(m)) {
                assertThrows(NullPointerException.class, () -> call.finish(null));
                assertEquals(1, Totals.of(lb).active());
            }
            assertEquals(new Totals(0, 1, 0, 0, 0, 0), Totals.of(lb));
        }
    }

    @Test
    void aTimeoutIsAFailureAndATimeout() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            int m = lb.method("m");
            try (Balancer.Call call = lb.call(m)) {
                call.finish(Outcome.TIMEOUT);
            }
            assertEquals(new Totals(0, 1, 0, 1, 1, 0), Totals.of(lb));
        }
    }

    @Test
    void theElapsedTimeReachesTheBalancer() throws InterruptedException {
        try (Balancer lb = new Balancer("loadbalance=shortestresponse")) {
            lb.update(invokers(1));
            int m = lb.method("m");
            try (Balancer.Call call = lb.call(m)) {
                Thread.sleep(20);
                call.finish(Outcome.SUCCESS);
            }
            long mean = Totals.of(lb).meanSuccessUs();
            // Microseconds: at least the sleep, and far from the sleep in nanoseconds (20 000 000).
            assertTrue(mean >= 20_000 && mean < 5_000_000, "mean success latency " + mean + " us");
        }
    }

    @Test
    void callAmongHonoursCandidatesAndExclusions() {
        try (Balancer lb = new Balancer("loadbalance=random")) {
            lb.update(invokers(4));
            int m = lb.method("m");
            for (int i = 0; i < 200; i++) {
                try (Balancer.Call call = lb.callAmong(m, null, new long[] {2, 4}, new long[] {2})) {
                    assertEquals(4, call.id());
                    call.finish(Outcome.SUCCESS);
                }
                try (Balancer.Call call = lb.callAmong(m, null, null, new long[] {1})) {
                    assertNotEquals(1, call.id());
                }
            }
            assertEquals(0, Totals.of(lb).active());
        }
    }

    @Test
    void selectingFailsAsSelectDoes() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            int m = lb.method("m");
            assertEquals(Status.NO_PROVIDER, assertThrows(PolylbException.class, () -> lb.select(m)).status());
            assertEquals(Status.NO_PROVIDER, assertThrows(PolylbException.class, () -> lb.call(m)).status());
            assertEquals(Status.NO_PROVIDER,
                    assertThrows(PolylbException.class, () -> lb.call(m, new byte[] {1})).status());
            assertEquals(Status.NO_PROVIDER,
                    assertThrows(PolylbException.class, () -> lb.callAmong(m, null, null, null)).status());
            lb.update(invokers(2));
            assertEquals(Status.NO_CANDIDATE, assertThrows(PolylbException.class,
                    () -> lb.callAmong(m, null, new long[] {1, 2}, new long[] {1, 2})).status());
            assertEquals(Status.UNKNOWN_METHOD, assertThrows(PolylbException.class, () -> lb.call(999)).status());
            assertEquals(new Totals(0, 0, 0, 0, 0, 0), Totals.of(lb));
        }
        Balancer closed = new Balancer("");
        closed.close();
        assertThrows(IllegalStateException.class, () -> closed.call(0));
    }

    @Test
    void onAClosedBalancerFinishThrowsAsReportDoesAndCloseIsSilent() {
        Balancer lb = new Balancer("loadbalance=leastactive");
        lb.update(invokers(2));
        int m = lb.method("m");
        Balancer.Call finished = lb.call(m);
        Balancer.Call abandoned = lb.call(m);
        lb.close();
        assertThrows(IllegalStateException.class, () -> lb.report(m, finished.id(), 1, Outcome.SUCCESS));
        assertThrows(IllegalStateException.class, () -> finished.finish(Outcome.SUCCESS));
        finished.finish(Outcome.SUCCESS); // already ended: nothing to report, nothing thrown
        finished.close();
        abandoned.close();
    }

    @Test
    void concurrentCallsWithAnUpdaterLeaveNothingInFlight() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(4));
            int m = lb.method("m");
            AtomicBoolean done = new AtomicBoolean();
            Thread updater = new Thread(() -> {
                for (int round = 0; !done.get(); round++) {
                    List<Invoker> set = invokers(round % 2 == 0 ? 4 : 5); // id 5 comes and goes
                    set.set(0, set.get(0).withWeight(100 + round % 7));
                    lb.update(set);
                }
            });
            updater.start();
            ExecutorService pool = Executors.newFixedThreadPool(4);
            List<Future<?>> futures = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                futures.add(pool.submit(() -> {
                    for (int i = 0; i < 20_000; i++) {
                        try (Balancer.Call call = lb.call(m)) {
                            switch (i % 4) {
                                case 0:
                                    call.finish(Outcome.SUCCESS);
                                    break;
                                case 1:
                                    call.finish(Outcome.FAILURE);
                                    call.finish(Outcome.SUCCESS);
                                    break;
                                case 2:
                                    throw new IllegalArgumentException("body failed");
                                default:
                                    break; // unfinished: cancelled by close
                            }
                        } catch (IllegalArgumentException expected) {
                            // the body's own
                        }
                    }
                }));
            }
            try {
                for (Future<?> f : futures) {
                    f.get(60, TimeUnit.SECONDS);
                }
            } finally {
                done.set(true);
                updater.join();
                pool.shutdown();
            }
            lb.update(invokers(4));
            Totals totals = Totals.of(lb);
            assertEquals(0, totals.active(), lb.statsJson());
        }
    }

    /** The body form reports by how the body ended, as Python's with-block does, and rethrows. */
    @Test
    void bodyFormJudgesHowTheBodyEnded() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(2));
            long[] seen = new long[1];
            String reply = lb.call(0, null, id -> {
                seen[0] = id;
                assertEquals(1, Totals.of(lb).active());
                return "hello from " + id;
            });
            assertEquals("hello from " + seen[0], reply);
            assertEquals(1, Totals.of(lb).succeeded());

            java.net.ConnectException refused = new java.net.ConnectException("refused");
            java.net.ConnectException thrown = assertThrows(java.net.ConnectException.class,
                    () -> lb.call(0, null, id -> { throw refused; }));
            assertSame(refused, thrown);
            assertEquals(0, thrown.getSuppressed().length);
            Totals t = Totals.of(lb);
            assertEquals(1, t.failures());
            assertEquals(0, t.timeouts());

            assertThrows(java.net.SocketTimeoutException.class,
                    () -> lb.call(0, null, id -> { throw new java.net.SocketTimeoutException(); }));
            assertThrows(java.util.concurrent.TimeoutException.class,
                    () -> lb.call(0, null, id -> { throw new java.util.concurrent.TimeoutException(); }));
            t = Totals.of(lb);
            assertEquals(3, t.failures());
            assertEquals(2, t.timeouts());

            assertThrows(InterruptedException.class,
                    () -> lb.call(0, null, id -> { throw new InterruptedException(); }));
            assertThrows(java.util.concurrent.CancellationException.class,
                    () -> lb.call(0, null, id -> { throw new java.util.concurrent.CancellationException(); }));
            t = Totals.of(lb);
            assertEquals(3, t.failures(), "cancels are no verdict");
            assertEquals(0, t.active());

            // Judged by the cause: a future's timeout, wrapped.
            assertThrows(java.util.concurrent.ExecutionException.class,
                    () -> lb.call(0, null, id -> {
                        throw new java.util.concurrent.ExecutionException(new java.util.concurrent.TimeoutException());
                    }));
            assertThrows(java.net.http.HttpTimeoutException.class,
                    () -> lb.call(0, null, id -> { throw new java.net.http.HttpTimeoutException("late"); }));
            t = Totals.of(lb);
            assertEquals(5, t.failures());
            assertEquals(4, t.timeouts());

            // An Error is a failure, as Python's MemoryError; so is any other Throwable.
            assertThrows(StackOverflowError.class,
                    () -> lb.call(0, null, id -> { throw new StackOverflowError(); }));
            Throwable odd = new Throwable("neither an Exception nor an Error");
            assertSame(odd, assertThrows(Throwable.class, () -> lb.call(0, null, id -> sneakyThrow(odd))));
            t = Totals.of(lb);
            assertEquals(7, t.failures());
            assertEquals(1, t.succeeded());
            assertEquals(0, t.active());
            assertEquals(10, t.selected());

            // The retry form excludes what was tried.
            for (int i = 0; i < 20; i++) {
                Long picked = lb.callAmong(0, null, null, new long[] {1}, id -> id);
                assertEquals(2L, picked.longValue());
            }
            assertEquals(0, Totals.of(lb).active());
        }
    }

    @SuppressWarnings("unchecked")
    private static <T, X extends Throwable> T sneakyThrow(Throwable t) throws X {
        throw (X) t;
    }

    /** A body that throws on a balancer closed meanwhile keeps its own exception. */
    @Test
    void bodyFormNeverReplacesTheBodysException() {
        Balancer lb = new Balancer("loadbalance=random");
        lb.update(invokers(1));
        IllegalArgumentException own = new IllegalArgumentException("bad request");
        IllegalArgumentException thrown = assertThrows(IllegalArgumentException.class,
                () -> lb.call(0, null, id -> {
                    lb.close();
                    throw own;
                }));
        assertSame(own, thrown);
        try (Balancer empty = new Balancer("loadbalance=random")) {
            PolylbException noProvider = assertThrows(PolylbException.class,
                    () -> empty.call(0, null, id -> {
                        throw new AssertionError("never runs: there is no provider");
                    }));
            assertEquals(Status.NO_PROVIDER, noProvider.status());
        }
    }
}
