package io.polylb.bench;

import io.polylb.Balancer;
import io.polylb.Invoker;
import io.polylb.Outcome;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * (a) io.polylb.Balancer select + report (weighted random, distinct weights) against the Java
 * floor of research/floors.md: ThreadLocalRandom plus a binary search over a precomputed
 * cumulative int[] (no report: it has no state to keep). Goal: polylb within 2x the floor.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
@State(Scope.Benchmark)
public class BalancerBench {
    @Param({"10", "100"})
    public int n;

    private Balancer random;
    private Balancer hash;
    private int method;
    private int hashMethod;
    private int[] cumulative;
    private int total;
    private long[] ids;
    private byte[][] keys;

    /**
     * One benchmark thread's position in {@link #keys}. A cursor in the shared state would be a
     * line both threads write on every call of the 2-thread consistent-hash row, a cost neither
     * polylb nor the floor has (DubboSelectBench keeps its invocations per thread too).
     */
    @State(Scope.Thread)
    public static class Cursor {
        int next;
    }

    @Setup(Level.Trial)
    public void setUp() {
        List<Invoker> invokers = new ArrayList<>();
        cumulative = new int[n];
        ids = new long[n];
        for (int i = 0; i < n; i++) {
            int weight = 100 + 7 * i;
            invokers.add(Invoker.of(i + 1, "10.0." + (i / 250) + "." + (i % 250) + ":20880").withWeight(weight));
            total += weight;
            cumulative[i] = total;
            ids[i] = i + 1;
        }
        random = new Balancer("loadbalance=random");
        random.update(invokers);
        method = random.method("sayHello");
        hash = new Balancer("loadbalance=consistenthash");
        hash.update(invokers);
        hashMethod = hash.method("sayHello");
        keys = new byte[1000][];
        for (int k = 0; k < keys.length; k++) {
            keys[k] = Long.toHexString(ThreadLocalRandom.current().nextLong() | Long.MIN_VALUE).getBytes();
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        random.close();
        hash.close();
    }

    /** The floor: a weighted pick with everything precomputed, in plain Java. */
    @Benchmark
    public long javaFloorWeightedPick() {
        int offset = ThreadLocalRandom.current().nextInt(total);
        int lo = 0;
        int hi = cumulative.length - 1;
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (cumulative[mid] <= offset) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return ids[lo];
    }

    /** polylb weighted random: select, then report the call's end (2 JNI calls). */
    @Benchmark
    public long polylbRandomSelectReport() {
        long id = random.select(method);
        random.report(method, id, 1000, Outcome.SUCCESS);
        return id;
    }

    /**
     * polylbRandomSelectReport timing the call itself, as the README's quick start does: the
     * baseline of {@link #polylbRandomCallFinish}, which reads the clock at the same two places.
     */
    @Benchmark
    public long polylbRandomSelectTimedReport() {
        long id = random.select(method);
        long t0 = System.nanoTime();
        random.report(method, id, (System.nanoTime() - t0) / 1000, Outcome.SUCCESS);
        return id;
    }

    /**
     * The same through a Balancer.Call (try-with-resources, finish): what the call object adds
     * to polylbRandomSelectTimedReport.
     */
    @Benchmark
    public long polylbRandomCallFinish() {
        try (Balancer.Call call = random.call(method)) {
            call.finish(Outcome.SUCCESS);
            return call.id();
        }
    }

    /** polylb weighted random, select only (the in-flight count is left to grow). */
    @Benchmark
    public long polylbRandomSelectOnly() {
        return random.select(method);
    }

    /** polylb weighted random restricted to candidates = every id (a long[] of n crosses JNI). */
    @Benchmark
    public long polylbRandomSelectAmongAllReport() {
        long id = random.selectAmong(method, null, ids, n, null, 0, 0);
        random.report(method, id, 1000, Outcome.SUCCESS);
        return id;
    }

    /** polylb consistent hash (16-char key through a byte[]), select + report. */
    @Benchmark
    public long polylbConsistentHashSelectReport(Cursor cursor) {
        byte[] key = keys[cursor.next++ % keys.length];
        long id = hash.select(hashMethod, key);
        hash.report(hashMethod, id, 1000, Outcome.SUCCESS);
        return id;
    }
}
