package io.polylb;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** {@code orca} (weighted round robin by providers' load reports) through the Java API. */
class OrcaTest {
    private static final long NOW_US = 1_700_000_000_000_000L;

    /**
     * The cross-language contract: invokers 1..4 at 10.0.0.&lt;id&gt;:20880 (weight 100), reports
     * (100, 0, 0.5) for 1, (100, 0, 0.25) for 2, (100, 50, 0.5) for 3 and none for 4, all at
     * {@link #NOW_US} with {@code orca.blackoutMs=0}: the first 12 picks. Computed from the Rust
     * library (tests/beyond_dubbo/orca.rs, the_cross_language_sequence); the other bindings
     * assert the same.
     */
    static final long[] CROSS_LANGUAGE_PICKS = {2, 4, 1, 2, 4, 2, 1, 2, 3, 4, 2, 1};

    /** ... and the counts over those 12 picks and 1188 more. */
    static final Map<Long, Integer> CROSS_LANGUAGE_COUNTS = Map.of(1L, 257, 2L, 515, 3L, 128, 4L, 300);

    /** Invokers 1..n at 10.0.0.1..n:20880, default weight. */
    private static List<Invoker> invokers(int n) {
        List<Invoker> list = new ArrayList<>();
        for (int id = 1; id <= n; id++) {
            list.add(Invoker.of(id, "10.0.0." + id + ":20880"));
        }
        return list;
    }

    /** A pick at {@code nowUs}, reported a success of 1000 µs. */
    private static long pick(Balancer lb, long nowUs) {
        long id = lb.select(Balancer.SERVICE_METHOD, null, nowUs);
        lb.report(Balancer.SERVICE_METHOD, id, 1000, Outcome.SUCCESS, nowUs);
        return id;
    }

    /** The stats row of invoker {@code id}. */
    private static String row(String json, long id) {
        Matcher m = Pattern.compile("\\{\"id\":" + id + ",.*?\\}").matcher(json);
        assertTrue(m.find(), "no row for " + id + " in " + json);
        return m.group();
    }

    /** A field's raw JSON value in invoker {@code id}'s stats row. */
    private static String field(String json, long id, String name) {
        String row = row(json, id);
        Matcher m = Pattern.compile("\"" + name + "\":([^,}]+)").matcher(row);
        assertTrue(m.find(), "no " + name + " in " + row);
        return m.group(1);
    }

    @Test
    void theCrossLanguageSequence() {
        try (Balancer lb = new Balancer("loadbalance=orca&orca.blackoutMs=0")) {
            assertEquals("orca", lb.strategy());
            lb.update(invokers(4));
            lb.reportLoad(1, 100, 0, 0.5, NOW_US);
            lb.reportLoad(2, 100, 0, 0.25, NOW_US);
            lb.reportLoad(3, 100, 50, 0.5, NOW_US);
            long[] picks = new long[CROSS_LANGUAGE_PICKS.length];
            Map<Long, Integer> counts = new TreeMap<>();
            for (int i = 0; i < picks.length; i++) {
                picks[i] = pick(lb, NOW_US);
                counts.merge(picks[i], 1, Integer::sum);
            }
            assertArrayEquals(CROSS_LANGUAGE_PICKS, picks);
            for (int i = 0; i < 1188; i++) {
                counts.merge(pick(lb, NOW_US), 1, Integer::sum);
            }
            assertEquals(new TreeMap<>(CROSS_LANGUAGE_COUNTS), counts);
        }
    }

    @Test
    void theReportsShowInTheStats() {
        try (Balancer lb = new Balancer("loadbalance=orca&orca.blackoutMs=0")) {
            lb.update(invokers(4));
            lb.reportLoad(1, 100, 0, 0.5, NOW_US);
            lb.reportLoad(2, 100, 0, 0.25, NOW_US);
            lb.reportLoad(3, 100, 50, 0.5, NOW_US);
            pick(lb, NOW_US); // the weights are taken up at a pick
            String json = lb.statsJson(NOW_US);
            // Capacities qps / (utilization + eps / qps): 200, 400, 100; 4 has none.
            assertEquals(200.0, Double.parseDouble(field(json, 1, "orca_weight")), 1e-9, json);
            assertEquals(400.0, Double.parseDouble(field(json, 2, "orca_weight")), 1e-9, json);
            assertEquals(100.0, Double.parseDouble(field(json, 3, "orca_weight")), 1e-9, json);
            assertEquals("null", field(json, 4, "orca_weight"), json);
            for (long id = 1; id <= 3; id++) {
                assertEquals("true", field(json, id, "orca_counted"), json);
            }
            assertEquals("false", field(json, 4, "orca_counted"), json);
            // orca_reported is the schedule's: it deals by reports (two weights count), on every row.
            for (long id = 1; id <= 4; id++) {
                assertEquals("true", field(json, id, "orca_reported"), json);
            }
            // Shares of 200 : 400 : 100 : the mean (233.3), out of 933.3.
            double total = 200 + 400 + 100 + 700.0 / 3;
            assertEquals(200 / total, Double.parseDouble(field(json, 1, "orca_share")), 1e-4, json);
            assertEquals(400 / total, Double.parseDouble(field(json, 2, "orca_share")), 1e-4, json);
            assertEquals(100 / total, Double.parseDouble(field(json, 3, "orca_share")), 1e-4, json);
            assertEquals(700.0 / 3 / total, Double.parseDouble(field(json, 4, "orca_share")), 1e-4, json);
        }
    }

    @Test
    void aWeightCountsOnlyAfterTheBlackout() {
        try (Balancer lb = new Balancer("loadbalance=orca&orca.blackoutMs=5000")) {
            lb.update(invokers(2));
            lb.reportLoad(1, 100, 0, 1.0, NOW_US);
            lb.reportLoad(2, 300, 0, 1.0, NOW_US);
            String during = lb.statsJson(NOW_US + 1_000_000);
            assertEquals("300", field(during, 2, "orca_weight"), during);
            assertEquals("false", field(during, 2, "orca_counted"), during);
            assertEquals("false", field(during, 2, "orca_reported"), during);
            Map<Long, Integer> counts = new TreeMap<>();
            for (int i = 0; i < 400; i++) {
                counts.merge(pick(lb, NOW_US + 1_000_000), 1, Integer::sum);
            }
            // Still the configured weights (equal), dealt in turn.
            assertEquals(Map.of(1L, 200, 2L, 200), counts);

            long later = NOW_US + 6_000_000;
            lb.reportLoad(1, 100, 0, 1.0, later);
            lb.reportLoad(2, 300, 0, 1.0, later);
            counts.clear();
            for (int i = 0; i < 400; i++) {
                counts.merge(pick(lb, later), 1, Integer::sum);
            }
            // 100 : 300, within the stride schedule's rounding.
            assertTrue(Math.abs(counts.get(1L) - 100) <= 2 && Math.abs(counts.get(2L) - 300) <= 2,
                    counts.toString());
            String after = lb.statsJson(later);
            assertEquals("true", field(after, 2, "orca_counted"), after);
            assertEquals("true", field(after, 2, "orca_reported"), after);
            assertEquals(0.75, Double.parseDouble(field(after, 2, "orca_share")), 1e-4, after);
        }
    }

    @Test
    void badReportsThrowAndChangeNothing() {
        try (Balancer lb = new Balancer("loadbalance=orca&orca.blackoutMs=0")) {
            lb.update(invokers(2));
            lb.reportLoad(1, 100, 0, 1.0, NOW_US);
            lb.reportLoad(2, 300, 0, 1.0, NOW_US);
            pick(lb, NOW_US);
            String before = lb.statsJson(NOW_US);
            double nan = Double.NaN;
            double inf = Double.POSITIVE_INFINITY;
            double[][] bad = {
                {nan, 0, 1}, {100, nan, 1}, {100, 0, nan},
                {inf, 0, 1}, {100, inf, 1}, {100, 0, inf}, {100, 0, Double.NEGATIVE_INFINITY},
                {-1, 0, 1}, {100, -1, 1}, {100, 0, -0.5},
                {100, 101, 1},
            };
            String[] named = {
                "qps = NaN", "eps = NaN", "utilization = NaN",
                "qps = Infinity", "eps = Infinity", "utilization = Infinity", "utilization = -Infinity",
                "qps = -1.0", "eps = -1.0", "utilization = -0.5",
                "eps = 101.0 is above qps = 100.0 (want eps <= qps)",
            };
            for (int i = 0; i < bad.length; i++) {
                double[] r = bad[i];
                PolylbException e = assertThrows(PolylbException.class,
                        () -> lb.reportLoad(2, r[0], r[1], r[2], NOW_US), named[i]);
                assertEquals(Status.INVALID_ARGUMENT, e.status(), named[i]);
                assertEquals(14, e.code());
                assertTrue(e.getMessage().contains(named[i]), e.getMessage());
                // The library's clock too.
                assertEquals(Status.INVALID_ARGUMENT,
                        assertThrows(PolylbException.class, () -> lb.reportLoad(2, r[0], r[1], r[2])).status());
            }
            assertEquals(before, lb.statsJson(NOW_US));
        }
    }

    @Test
    void reportsNobodyUsesAreAccepted() {
        try (Balancer lb = new Balancer("loadbalance=orca&orca.blackoutMs=0")) {
            lb.update(invokers(2));
            String before = lb.statsJson(NOW_US);
            // An id not in the set, as a report of a call to a provider that left.
            assertDoesNotThrow(() -> lb.reportLoad(99, 1, 0, 1.0, NOW_US));
            assertDoesNotThrow(() -> lb.reportLoad(-1, 1, 0, 1.0, NOW_US)); // an id above INT64_MAX
            // A report with no qps or no utilization says nothing of capacity.
            assertDoesNotThrow(() -> lb.reportLoad(1, 0, 0, 1.0, NOW_US));
            assertDoesNotThrow(() -> lb.reportLoad(1, 100, 0, 0, NOW_US));
            assertEquals(before, lb.statsJson(NOW_US));
            assertEquals("null", field(before, 1, "orca_weight"), before);
        }
        for (String strategy : new String[] {"random", "roundrobin", "leastactive", "adaptive", "p2c"}) {
            try (Balancer lb = new Balancer("loadbalance=" + strategy)) {
                lb.update(invokers(2));
                assertDoesNotThrow(() -> lb.reportLoad(1, 100, 0, 0.5, NOW_US), strategy);
                assertDoesNotThrow(() -> lb.reportLoad(1, 100, 0, 0.5), strategy);
                assertTrue(!lb.statsJson(NOW_US).contains("orca_"), strategy);
                // ... checked all the same, as every binding checks them.
                assertEquals(Status.INVALID_ARGUMENT, assertThrows(PolylbException.class,
                        () -> lb.reportLoad(1, -1, 0, 0.5, NOW_US)).status(), strategy);
            }
        }
    }

    @Test
    void orcaKeysAreCheckedLikeEveryOtherKey() {
        for (String config : new String[] {
            "loadbalance=random&orca.blackoutMs=0", // another strategy's option
            "loadbalance=roundrobin&orca.errorPenalty=2",
            "loadbalance=orca&orca.blackoutMs=-1",
            "loadbalance=orca&orca.expirationMs=0",
            "loadbalance=orca&orca.updateMs=0",
            "loadbalance=orca&orca.errorPenalty=101",
            "loadbalance=orca&orca.errorPenalty=x",
            "loadbalance=orca&orca.blackoutms=0", // misspelt
            "loadbalance=orca&subset.key=a&subset.size=2",
            "loadbalance=orca&slowstart.windowMs=1000",
        }) {
            PolylbException e = assertThrows(PolylbException.class, () -> new Balancer(config), config);
            assertEquals(Status.INVALID_CONFIG, e.status(), config);
            String key = config.substring(config.indexOf('&') + 1, config.indexOf('=', config.indexOf('&')));
            assertTrue(e.getMessage().contains(key), config + ": " + e.getMessage());
        }
        try (Balancer lb = new Balancer(
                "loadbalance=orca&orca.blackoutMs=0&orca.expirationMs=1&orca.updateMs=1&orca.errorPenalty=0")) {
            assertEquals("orca", lb.strategy());
        }
    }

    @Test
    void aClosedBalancerRefusesReports() {
        Balancer lb = new Balancer("loadbalance=orca");
        lb.close();
        assertThrows(IllegalStateException.class, () -> lb.reportLoad(1, 100, 0, 0.5));
        assertThrows(IllegalStateException.class, () -> lb.reportLoad(1, 100, 0, 0.5, NOW_US));
        assertThrows(IllegalStateException.class, () -> lb.reportReconnect(1));
        assertThrows(IllegalStateException.class, () -> lb.reportReconnect(1, NOW_US));
    }

    /** Picks per id over 400 picks at {@code nowUs}. */
    private static Map<Long, Integer> deal(Balancer lb, long nowUs) {
        Map<Long, Integer> counts = new TreeMap<>();
        for (int i = 0; i < 400; i++) {
            counts.merge(pick(lb, nowUs), 1, Integer::sum);
        }
        return counts;
    }

    private static void assertDealt(Map<Long, Integer> counts, int one, int two) {
        assertTrue(Math.abs(counts.getOrDefault(1L, 0) - one) <= 2
                && Math.abs(counts.getOrDefault(2L, 0) - two) <= 2, counts.toString());
    }

    /**
     * A reconnect restarts the invoker's run of reports (gRFC A58: a subchannel READY again): its
     * weight stops counting at once and counts again a blackout after its next report.
     */
    @Test
    void aReconnectRestartsTheBlackout() {
        try (Balancer lb = new Balancer("loadbalance=orca&orca.blackoutMs=5000&orca.updateMs=60000")) {
            lb.update(invokers(2));
            lb.reportLoad(1, 100, 0, 1.0, NOW_US);
            lb.reportLoad(2, 300, 0, 1.0, NOW_US);
            long counted = NOW_US + 6_000_000;
            assertDealt(deal(lb, counted), 100, 300);

            lb.reportReconnect(2, counted);
            assertDoesNotThrow(() -> lb.reportReconnect(99)); // not in the set
            assertDoesNotThrow(() -> lb.reportReconnect(-1)); // above INT64_MAX
            String at = lb.statsJson(counted);
            assertEquals("false", field(at, 2, "orca_counted"), at);
            assertEquals("300", field(at, 2, "orca_weight"), at);
            assertDealt(deal(lb, counted), 200, 200);

            long back = counted + 1_000_000;
            lb.reportLoad(1, 100, 0, 1.0, back);
            lb.reportLoad(2, 300, 0, 1.0, back);
            assertDealt(deal(lb, back + 4_900_000), 200, 200);
            assertDealt(deal(lb, back + 5_000_000), 100, 300);
        }
        // Other strategies accept it and ignore it.
        try (Balancer lb = new Balancer("loadbalance=roundrobin")) {
            lb.update(List.of(Invoker.of(1, "10.0.0.1:20880").withWeight(100),
                    Invoker.of(2, "10.0.0.2:20880").withWeight(300)));
            lb.reportReconnect(1, NOW_US);
            lb.reportReconnect(2);
            assertEquals(Map.of(1L, 100, 2L, 300), deal(lb, NOW_US));
        }
    }
}
