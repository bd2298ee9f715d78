package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.function.IntToLongFunction;
import org.junit.jupiter.api.Test;

/**
 * The hot calls allocate nothing on the Java heap once compiled, as the library's select and
 * report allocate nothing natively (tests/allocations.rs): keys of up to 16 bytes cross JNI packed
 * in two longs, longer ones and id arrays are read in place, ids and statuses are primitives.
 *
 * <p>Measured with the thread's allocation counter around a loop run after the same loop has been
 * run (and compiled) several times; the bound, a tenth of a byte per call, leaves room for the
 * odd allocation of the runtime (a deoptimisation, a class initialised) but not for one object
 * per call (16 B at least). Not covered: {@link Balancer.Call}, whose object the JIT removes only
 * where its escape analysis sees every use (the try-with-resources idiom keeps it: C2 leaves the
 * {@code close()} of its exception path out of line, so each call allocates its 40 B).
 */
class AllocationTest {
    private static final com.sun.management.ThreadMXBean THREADS =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    private static final int CALLS = 200_000;

    private static List<Invoker> invokers() {
        List<Invoker> list = new ArrayList<>();
        for (int i = 1; i <= 10; i++) {
            list.add(Invoker.of(i, "10.0.0." + i + ":20880"));
        }
        return list;
    }

    /** Bytes allocated per call by {@code loop}, once it is compiled; its result is checked too. */
    private static double bytesPerCall(String what, IntToLongFunction loop) {
        assertTrue(THREADS.isThreadAllocatedMemorySupported(), "the JVM counts no allocated bytes");
        THREADS.setThreadAllocatedMemoryEnabled(true);
        for (int i = 0; i < 10; i++) {
            assertTrue(loop.applyAsLong(CALLS / 10) > 0, what);
        }
        long thread = Thread.currentThread().getId();
        long before = THREADS.getThreadAllocatedBytes(thread);
        long sum = loop.applyAsLong(CALLS);
        long after = THREADS.getThreadAllocatedBytes(thread);
        assertTrue(sum >= CALLS, what + ": every select returns an id >= 1");
        return (double) (after - before) / CALLS;
    }

    @Test
    void selectAndReportAllocateNothing() {
        try (Balancer random = new Balancer("loadbalance=random");
                Balancer hash = new Balancer("loadbalance=consistenthash")) {
            random.update(invokers());
            hash.update(invokers());
            int m = random.method("sayHello");
            int h = hash.method("sayHello");
            byte[] shortKey = "user-42".getBytes(StandardCharsets.UTF_8);
            byte[] longKey = "a key longer than the sixteen packed bytes".getBytes(StandardCharsets.UTF_8);
            long[] candidates = {1, 2, 3, 4, 5};
            long[] excluded = {2, 4};
            List<String> failures = new ArrayList<>();
            check(failures, "select + report", n -> {
                long sum = 0;
                for (int i = 0; i < n; i++) {
                    long id = random.select(m);
                    random.report(m, id, 100, Outcome.SUCCESS);
                    sum += id;
                }
                return sum;
            });
            check(failures, "selectByKey(String) + report", n -> {
                long sum = 0;
                for (int i = 0; i < n; i++) {
                    long id = hash.selectByKey(h, "user-42");
                    hash.report(h, id, 100, Outcome.FAILURE);
                    sum += id;
                }
                return sum;
            });
            check(failures, "select(short byte[] key) + report", n -> {
                long sum = 0;
                for (int i = 0; i < n; i++) {
                    long id = hash.select(h, shortKey);
                    hash.report(h, id, 100, Outcome.TIMEOUT);
                    sum += id;
                }
                return sum;
            });
            check(failures, "select(long byte[] key) + report", n -> {
                long sum = 0;
                for (int i = 0; i < n; i++) {
                    long id = hash.select(h, longKey);
                    hash.report(h, id, 100, Outcome.SUCCESS);
                    sum += id;
                }
                return sum;
            });
            check(failures, "selectAmong + report", n -> {
                long sum = 0;
                for (int i = 0; i < n; i++) {
                    long id = random.selectAmong(m, null, candidates, candidates.length, excluded, excluded.length, 0);
                    random.report(m, id, 100, Outcome.CANCELLED);
                    sum += id;
                }
                return sum;
            });
            assertEquals(List.of(), failures);
        }
    }

    private static void check(List<String> failures, String what, IntToLongFunction loop) {
        double bytes = bytesPerCall(what, loop);
        if (bytes >= 0.1) {
            failures.add(what + ": " + bytes + " B per call");
        }
    }
}
