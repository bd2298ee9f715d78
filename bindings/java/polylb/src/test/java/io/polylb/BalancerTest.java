package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

class BalancerTest {
    private static final long NOW_MS = 1_700_000_000_000L;
    private static final long NOW_US = NOW_MS * 1000;

    private static List<Invoker> invokers(int... weights) {
        List<Invoker> list = new ArrayList<>();
        for (int i = 0; i < weights.length; i++) {
            list.add(Invoker.of(i + 1, "10.0.0." + (i + 1) + ":20880").withWeight(weights[i]));
        }
        return list;
    }

    @Test
    void nativeVersionIsTheCoreLibrarysVersion() throws Exception {
        // plb_version() returns the polylb crate's version (the core library the JNI glue links),
        // which the repository's Cargo.toml declares; the glue crate's own version is not it.
        String cargo = java.nio.file.Files.readString(java.nio.file.Path.of("..", "..", "..", "Cargo.toml"));
        Matcher m = Pattern.compile("(?s)\\[package\\]\\s*name\\s*=\\s*\"polylb\"\\s*version\\s*=\\s*\"([^\"]+)\"")
                .matcher(cargo);
        assertTrue(m.find(), "no polylb version in the root Cargo.toml");
        assertEquals(m.group(1), Balancer.nativeVersion());
    }

    @Test
    void reportsVersionAndStrategy() {
        assertFalse(Balancer.nativeVersion().isEmpty());
        try (Balancer random = new Balancer("");
                Balancer rr = new Balancer("loadbalance=roundrobin")) {
            assertEquals("random", random.strategy());
            assertEquals("roundrobin", rr.strategy());
        }
    }

    @Test
    void roundRobinFollowsDubbosSmoothSequence() {
        try (Balancer lb = new Balancer("loadbalance=roundrobin")) {
            lb.update(invokers(5, 1, 1));
            int m = lb.method("sayHello");
            StringBuilder seq = new StringBuilder();
            for (int i = 0; i < 7; i++) {
                long id = lb.select(m);
                lb.report(m, id, 100, Outcome.SUCCESS);
                seq.append(id - 1);
            }
            assertEquals("0010200", seq.toString());
        }
    }

    @Test
    void consistentHashIsStablePerKeyAndSpreadsKeys() {
        try (Balancer lb = new Balancer("loadbalance=consistenthash")) {
            lb.update(invokers(100, 100, 100, 100, 100));
            int m = lb.method("get");
            Set<Long> seen = new HashSet<>();
            for (int k = 0; k < 500; k++) {
                byte[] key = ("user-" + k).getBytes(StandardCharsets.UTF_8);
                long first = lb.select(m, key);
                lb.report(m, first, 10, Outcome.SUCCESS);
                long again = lb.select(m, key);
                lb.report(m, again, 10, Outcome.SUCCESS);
                assertEquals(first, again);
                seen.add(first);
            }
            assertEquals(5, seen.size());
        }
    }

    /**
     * Short keys cross to the native side packed in two longs, longer ones as arrays: every
     * length, byte value and string form must hash as the same bytes (checked against the
     * array path, which selectAmong always takes, over a ring of 50 providers).
     */
    @Test
    void packedAndArrayKeysHashTheSameBytes() {
        List<Invoker> set = new ArrayList<>();
        for (int i = 1; i <= 50; i++) {
            set.add(Invoker.of(i, "10.0.1." + i + ":20880"));
        }
        try (Balancer lb = new Balancer("loadbalance=consistenthash")) {
            lb.update(set);
            int m = lb.method("get");
            java.util.SplittableRandom random = new java.util.SplittableRandom(7);
            String[] alphabets = {"abcdefghijklmnopqrstuvwxyz0123456789-:", "aé中\uD83D\uDE00z\u007F\u0080"};
            for (int length = 0; length <= 40; length++) {
                for (int trial = 0; trial < 40; trial++) {
                    byte[] bytes = new byte[length];
                    for (int i = 0; i < length; i++) {
                        bytes[i] = (byte) random.nextInt(256);
                    }
                    assertSamePick(lb, m, bytes, lb.select(m, bytes));
                    // Whole code points: a lone surrogate half has no UTF-8 form (INVALID_UTF8).
                    int[] alphabet = alphabets[trial % 2].codePoints().toArray();
                    StringBuilder text = new StringBuilder();
                    while (text.length() < length) {
                        text.appendCodePoint(alphabet[random.nextInt(alphabet.length)]);
                    }
                    String key = text.toString();
                    assertSamePick(lb, m, key.getBytes(StandardCharsets.UTF_8), lb.selectByKey(m, key));
                }
            }
            long noKey = lb.selectByKey(m, null);
            lb.report(m, noKey, 1, Outcome.CANCELLED);
            assertSamePick(lb, m, new byte[0], noKey);
        }
    }

    private static void assertSamePick(Balancer lb, int m, byte[] key, long picked) {
        lb.report(m, picked, 1, Outcome.CANCELLED);
        long viaArray = lb.selectAmong(m, key, null, null);
        lb.report(m, viaArray, 1, Outcome.CANCELLED);
        assertEquals(viaArray, picked, () -> "key of " + key.length + " bytes");
    }

    @Test
    void candidatesAndExclusionsAreHonoured() {
        try (Balancer lb = new Balancer("loadbalance=random")) {
            lb.update(invokers(100, 100, 100, 100));
            int m = lb.method("m");
            long[] candidates = {2, 4, 99};
            for (int i = 0; i < 200; i++) {
                long id = lb.selectAmong(m, null, candidates, 2, null, 0, 0);
                assertTrue(id == 2 || id == 4, "picked " + id);
                lb.report(m, id, 1, Outcome.CANCELLED);
                long notTwo = lb.selectAmong(m, null, new long[] {2, 4}, new long[] {2});
                assertEquals(4, notTwo);
                lb.report(m, notTwo, 1, Outcome.CANCELLED);
                long notOne = lb.selectAmong(m, null, null, new long[] {1});
                assertNotEquals(1, notOne);
                lb.report(m, notOne, 1, Outcome.CANCELLED);
            }
        }
    }

    @Test
    void statsShowCountersAndWarmUpWeights() {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(List.of(
                    Invoker.of(7, "10.0.0.7:20880").withStartTimeMs(NOW_MS - 300_000).withZone("zone-é"),
                    Invoker.of(8, "10.0.0.8:20880").withStartTimeMs(NOW_MS - 60_000).withWarmupMs(120_000),
                    Invoker.of(9, "[::1]:20880").withWeight(14).withStartTimeMs(NOW_MS - 300_000)));
            Map<Long, Integer> weights = effectiveWeights(lb.statsJson(NOW_US));
            assertEquals(50, weights.get(7L));
            assertEquals(50, weights.get(8L));
            assertEquals(6, weights.get(9L), "Dubbo's float32 rounding: 14 * 0.5 -> 6");

            int m = lb.method("sayHello");
            long id = lb.select(m);
            String during = lb.statsJson(NOW_US);
            assertTrue(during.contains("\"active\":1"), during);
            lb.report(m, id, 1500, Outcome.SUCCESS);
            String after = lb.statsJson(NOW_US);
            assertTrue(after.contains("\"succeeded\":1"), after);
            assertTrue(after.contains("zone-é"), after);
            assertTrue(after.contains("\"sayHello\""), after);
        }
    }

    static Map<Long, Integer> effectiveWeights(String json) {
        Map<Long, Integer> out = new HashMap<>();
        Matcher m = Pattern.compile("\\{\"id\":(\\d+),.*?\"effective_weight\":(-?\\d+)").matcher(json);
        while (m.find()) {
            out.put(Long.parseLong(m.group(1)), Integer.parseInt(m.group(2)));
        }
        return out;
    }

    @Test
    void methodIdsAreInternedOnce() {
        try (Balancer lb = new Balancer("")) {
            assertEquals(Balancer.SERVICE_METHOD, lb.method(""));
            int a = lb.method("a");
            assertEquals(a, lb.method("a"));
            assertNotEquals(a, lb.method("b"));
            assertNotEquals(a, lb.method("日本語"));
        }
    }

    @Test
    void updateWithSeveralBadInvokersReportsWhatTheCAbiReports() {
        // The C ABI checks every address and zone for UTF-8 first, then each invoker in order:
        // id <= INT64_MAX, weight >= 0, id not used before. Go passes its list unchanged, so the
        // same list gives the same error in every language; a negative id here is an id the core
        // rejects at its own place in that order.
        try (Balancer lb = new Balancer("loadbalance=roundrobin")) {
            PolylbException weightFirst = assertThrows(PolylbException.class, () -> lb.update(
                    List.of(Invoker.of(1, "a:1").withWeight(-1), Invoker.of(-1, "b:1"))));
            assertEquals(Status.NEGATIVE_WEIGHT, weightFirst.status(), weightFirst.getMessage());
            assertEquals(Status.DUPLICATE_ID, assertThrows(PolylbException.class, () -> lb.update(
                    List.of(Invoker.of(1, "a:1"), Invoker.of(1, "b:1"), Invoker.of(-5, "c:1")))).status());
            assertEquals(Status.INVALID_UTF8, assertThrows(PolylbException.class, () -> lb.update(
                    List.of(Invoker.of(-1, "a:1"), Invoker.of(2, "\uD800b:1")))).status());
            PolylbException idSecond = assertThrows(PolylbException.class, () -> lb.update(
                    List.of(Invoker.of(1, "a:1"), Invoker.of(-7, "b:1").withWeight(-1), Invoker.of(-1, "c:1"))));
            assertEquals(Status.ID_OUT_OF_RANGE, idSecond.status());
            assertTrue(idSecond.getMessage().contains("invoker #1: id -7 is outside 0.."), idSecond.getMessage());
        }
    }

    @Test
    void badInputBecomesExceptionsWithTheLibrarysMessage() {
        PolylbException config = assertThrows(PolylbException.class, () -> new Balancer("loadBalance=random"));
        assertEquals(Status.INVALID_CONFIG, config.status());
        assertTrue(config.getMessage().contains("loadBalance"), config.getMessage());
        assertEquals(Status.INVALID_CONFIG,
                assertThrows(PolylbException.class, () -> new Balancer("loadbalance=nosuch")).status());
        assertEquals(Status.INVALID_CONFIG,
                assertThrows(PolylbException.class, () -> new Balancer("loadbalance=consistenthash&hash.nodes=2"))
                        .status());

        try (Balancer lb = new Balancer("loadbalance=roundrobin")) {
            int m = lb.method("m");
            assertEquals(Status.NO_PROVIDER, assertThrows(PolylbException.class, () -> lb.select(m)).status());
            assertEquals(Status.DUPLICATE_ID, assertThrows(PolylbException.class,
                    () -> lb.update(List.of(Invoker.of(1, "a:1"), Invoker.of(1, "b:1")))).status());
            assertEquals(Status.NEGATIVE_WEIGHT, assertThrows(PolylbException.class,
                    () -> lb.update(List.of(Invoker.of(1, "a:1").withWeight(-1)))).status());
            PolylbException negativeId = assertThrows(PolylbException.class,
                    () -> lb.update(List.of(Invoker.of(-1, "a:1"))));
            assertEquals(Status.ID_OUT_OF_RANGE, negativeId.status());
            // Named as given, as Python and Go name it (not as the u64 it reinterprets to).
            assertTrue(negativeId.getMessage().contains("id -1 is outside 0.."), negativeId.getMessage());
            assertThrows(NullPointerException.class, () -> Invoker.of(1, null));
            assertThrows(NullPointerException.class, () -> lb.update(null));

            lb.update(invokers(1, 2, 3));
            assertEquals(Status.UNKNOWN_METHOD, assertThrows(PolylbException.class, () -> lb.select(12345)).status());
            assertEquals(Status.UNKNOWN_METHOD, assertThrows(PolylbException.class, () -> lb.select(-1)).status());
            assertEquals(Status.UNKNOWN_CANDIDATE, assertThrows(PolylbException.class,
                    () -> lb.selectAmong(m, null, new long[] {42}, null)).status());
            assertEquals(Status.NO_CANDIDATE, assertThrows(PolylbException.class,
                    () -> lb.selectAmong(m, null, new long[] {1, 2}, new long[] {1, 2})).status());
            assertThrows(IndexOutOfBoundsException.class,
                    () -> lb.selectAmong(m, null, new long[] {1}, 5, null, 0, 0));
            assertThrows(IndexOutOfBoundsException.class,
                    () -> lb.selectAmong(m, null, null, 0, new long[0], -1, 0));
            PolylbException negative = assertThrows(PolylbException.class, () -> lb.report(m, 1, -5, Outcome.SUCCESS));
            assertEquals(Status.INVALID_ARGUMENT, negative.status());
            assertTrue(negative.getMessage().contains("elapsedUs = -5"), negative.getMessage());
            assertEquals(Status.UNKNOWN_METHOD, assertThrows(PolylbException.class,
                    () -> lb.report(999, 1, 5, Outcome.SUCCESS)).status());
            assertThrows(NullPointerException.class, () -> lb.report(m, 1, 5, null));
            PolylbException nan = assertThrows(PolylbException.class,
                    () -> lb.reportProviderMetrics(m, 1, NOW_MS, Double.NaN, 10, 0));
            assertEquals(Status.INVALID_ARGUMENT, nan.status());
            assertTrue(nan.getMessage().contains("cpuLoad = NaN"), nan.getMessage());
            assertTrue(assertThrows(PolylbException.class, () -> lb.reportProviderMetrics(m, 1, NOW_MS, 0.5, -1, 0))
                    .getMessage().contains("rtUs = -1"));
            assertTrue(assertThrows(PolylbException.class, () -> lb.reportProviderMetrics(m, 1, -2, 0.5, 1, 0))
                    .getMessage().contains("providerTimeMs = -2"));
            // Text Java can hold but UTF-8 cannot (a lone surrogate) is INVALID_UTF8, as in the
            // other bindings: never replaced by U+FFFD or '?', which would make two names one.
            assertEquals(Status.INVALID_UTF8, assertThrows(PolylbException.class,
                    () -> lb.update(List.of(Invoker.of(5, "\uD800bad:1")))).status());
            assertEquals(Status.INVALID_UTF8, assertThrows(PolylbException.class,
                    () -> lb.update(List.of(Invoker.of(6, "ok:1").withZone("\uDFFF")))).status());
            assertEquals(Status.INVALID_UTF8, assertThrows(PolylbException.class,
                    () -> lb.method("get\uD800")).status());
            assertEquals(Status.INVALID_UTF8, assertThrows(PolylbException.class,
                    () -> lb.selectByKey(m, "key-\uDC00")).status());
            assertEquals(Status.INVALID_UTF8, assertThrows(PolylbException.class,
                    () -> lb.selectByKey(m, "a key longer than sixteen chars \uD800")).status());
            assertEquals(Status.INVALID_UTF8, assertThrows(PolylbException.class,
                    () -> new Balancer("loadbalance=random&zone=\uD800"))
                    .status());
            // ... with the message C and Go get for the same text (the surrogate's three bytes,
            // as Python passes them), which names the invoker and the field and counts bytes of
            // UTF-8 (a supplementary character before it is 4 of them, as in Java's 2 chars).
            assertEquals("INVALID_UTF8: invoker #1 address is not valid UTF-8: invalid utf-8 sequence of 1 bytes"
                    + " from index 5", assertThrows(PolylbException.class, () -> lb.update(
                            List.of(Invoker.of(1, "a:1"), Invoker.of(5, "\uD83D\uDE00:\uD800")))).getMessage());
            assertEquals("INVALID_UTF8: invoker #0 zone is not valid UTF-8: invalid utf-8 sequence of 1 bytes"
                    + " from index 2", assertThrows(PolylbException.class, () -> lb.update(
                            List.of(Invoker.of(6, "ok:1").withZone("\u0000z\uDFFF")))).getMessage());
            assertEquals("INVALID_UTF8: config is not valid UTF-8: invalid utf-8 sequence of 1 bytes from index 24",
                    assertThrows(PolylbException.class, () -> new Balancer("loadbalance=random&zone=\uD800"))
                            .getMessage());
            // A method name or a key never reaches the library with a lone surrogate; the words
            // are the same (Python and Go give them too).
            assertEquals("INVALID_UTF8: method name is not valid UTF-8: invalid utf-8 sequence of 1 bytes"
                    + " from index 7", assertThrows(PolylbException.class,
                            () -> lb.method("\uD83D\uDE00say\uDC00Hello")).getMessage());
            assertEquals("INVALID_UTF8: key is not valid UTF-8: invalid utf-8 sequence of 1 bytes from index 1",
                    assertThrows(PolylbException.class, () -> lb.selectByKey(m, "k\uD800")).getMessage());
            // A surrogate pair is one character, with a UTF-8 form.
            assertTrue(lb.method("get\uD83D\uDE00") > 0);
            // An empty zone is no zone, as a zero-length one is in C, Go and Python.
            lb.update(List.of(Invoker.of(1, "a:1").withZone(""), Invoker.of(2, "b:1")));
            assertFalse(lb.statsJson().contains("\"zone\""), lb.statsJson());
            lb.update(invokers(1, 2, 3));
            // A report for an id that is not in the set is harmless.
            lb.report(m, 77, 5, Outcome.FAILURE);
            // A rejected update changed nothing.
            assertEquals(3, effectiveWeights(lb.statsJson()).size());
        }
    }

    @Test
    void closedBalancerThrowsInsteadOfCrashing() {
        Balancer lb = new Balancer("");
        lb.update(invokers(1));
        lb.close();
        lb.close(); // idempotent
        assertTrue(lb.isClosed());
        assertThrows(IllegalStateException.class, () -> lb.select(0));
        assertThrows(IllegalStateException.class, () -> lb.report(0, 1, 1, Outcome.SUCCESS));
        assertThrows(IllegalStateException.class, () -> lb.update(invokers(1)));
        assertThrows(IllegalStateException.class, lb::statsJson);
        assertEquals("Balancer[closed]", lb.toString());
    }

    @Test
    void statsRacingCloseAreTheWholeSetOrAnError() throws Exception {
        // close() marks the balancer closed, then empties its set: stats read in between were
        // of the empty set, every provider gone, with no error.
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try {
            for (int round = 0; round < 1000; round++) {
                Balancer lb = new Balancer("");
                lb.update(invokers(100, 100)); // small: the read is short, so is the gap before it
                Future<Integer> reads = pool.submit(() -> {
                    int whole = 0;
                    while (true) {
                        String json;
                        try {
                            json = lb.statsJson();
                        } catch (IllegalStateException closed) {
                            return whole;
                        }
                        assertEquals(2, effectiveWeights(json).size(), json);
                        whole++;
                    }
                });
                long until = System.nanoTime() + 20_000 + round * 37L;
                while (System.nanoTime() < until) {
                    Thread.onSpinWait();
                }
                lb.close();
                reads.get(10, TimeUnit.SECONDS);
            }
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void toStringRacingCloseNeverThrows() throws Exception {
        // toString read "closed" and then asked the native side for the strategy: a close() in
        // between made it throw IllegalStateException, in the loggers of shutdown paths.
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try {
            for (int round = 0; round < 300; round++) {
                Balancer lb = new Balancer("loadbalance=roundrobin");
                Future<Set<String>> seen = pool.submit(() -> {
                    Set<String> texts = new HashSet<>();
                    while (!lb.isClosed()) {
                        texts.add(lb.toString());
                    }
                    texts.add(lb.toString());
                    return texts;
                });
                long until = System.nanoTime() + 20_000 + round * 300L;
                while (System.nanoTime() < until) {
                    Thread.onSpinWait();
                }
                lb.close();
                Set<String> texts = seen.get(10, TimeUnit.SECONDS);
                assertTrue(Set.of("Balancer[roundrobin]", "Balancer[closed]").containsAll(texts), texts.toString());
                assertTrue(texts.contains("Balancer[closed]"), texts.toString());
            }
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void closeRacingCallsNeverReachesFreedMemory() throws Exception {
        // Before close() stopped freeing the native balancer, a select racing it read freed
        // memory (a JVM crash, or garbage ids). Now each racing call either completes with an
        // id of the set or throws IllegalStateException.
        for (int round = 0; round < 200; round++) {
            Balancer lb = new Balancer("loadbalance=leastactive");
            lb.update(invokers(1, 2, 3));
            int m = lb.method("m");
            java.util.concurrent.CountDownLatch started = new java.util.concurrent.CountDownLatch(2);
            java.util.concurrent.atomic.AtomicReference<Throwable> unexpected =
                    new java.util.concurrent.atomic.AtomicReference<>();
            Thread[] callers = new Thread[2];
            for (int t = 0; t < callers.length; t++) {
                callers[t] = new Thread(() -> {
                    started.countDown();
                    try {
                        while (true) {
                            long id = lb.select(m);
                            if (id < 1 || id > 3) {
                                unexpected.compareAndSet(null, new AssertionError("id " + id));
                                return;
                            }
                            lb.report(m, id, 10, Outcome.SUCCESS);
                        }
                    } catch (IllegalStateException closed) {
                        // the expected end
                    } catch (Throwable other) {
                        unexpected.compareAndSet(null, other);
                    }
                });
                callers[t].start();
            }
            started.await();
            lb.close();
            for (Thread caller : callers) {
                caller.join();
            }
            if (unexpected.get() != null) {
                throw new AssertionError("a call racing close() failed otherwise", unexpected.get());
            }
            assertTrue(lb.isClosed());
        }
    }

    @Test
    void unclosedBalancersAreFreedByTheCleaner() throws InterruptedException {
        for (int i = 0; i < 2000; i++) {
            Balancer lb = new Balancer("loadbalance=consistenthash");
            lb.update(invokers(1, 2, 3));
            lb.select(0, new byte[] {1});
        }
        System.gc();
        Thread.sleep(50);
    }

    @Test
    void largeKeysAndSetsCrossTheBoundary() {
        try (Balancer lb = new Balancer("loadbalance=consistenthash")) {
            int n = 1000;
            int[] weights = new int[n];
            java.util.Arrays.fill(weights, 100);
            lb.update(invokers(weights));
            int m = lb.method("m");
            byte[] bigKey = new byte[10_000];
            long id = lb.select(m, bigKey);
            assertEquals(id, lb.select(m, bigKey));
            long[] all = new long[n];
            for (int i = 0; i < n; i++) {
                all[i] = i + 1;
            }
            // More candidates than the native stack buffer holds.
            long among = lb.selectAmong(m, bigKey, all, new long[] {id});
            assertNotEquals(id, among);
        }
    }

    @Test
    void concurrentSelectAndReportKeepCountersConsistent() throws Exception {
        try (Balancer lb = new Balancer("loadbalance=leastactive")) {
            lb.update(invokers(100, 100, 100, 100));
            int m = lb.method("m");
            ExecutorService pool = Executors.newFixedThreadPool(4);
            List<Future<?>> futures = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                futures.add(pool.submit(() -> {
                    for (int i = 0; i < 20_000; i++) {
                        long id = lb.select(m);
                        lb.report(m, id, 50, (i % 10 == 0) ? Outcome.FAILURE : Outcome.SUCCESS);
                    }
                }));
                // Updates racing selects must be safe too.
                lb.update(invokers(100, 100, 100, 100));
            }
            for (Future<?> f : futures) {
                f.get(60, TimeUnit.SECONDS);
            }
            pool.shutdown();
            String stats = lb.statsJson();
            assertFalse(stats.matches("(?s).*\"active\":[1-9].*"), stats);
        }
    }
}
