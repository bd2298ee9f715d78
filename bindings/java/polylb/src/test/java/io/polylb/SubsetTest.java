package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * Subsetting ({@code subset.size} / {@code subset.key} / {@code subset.index}) through the Java API:
 * picks stay in the subset the stats mark {@code in_subset}, the subset depends on the key and the
 * addresses only, a failover leaves it only once its members are all excluded, bad configs are
 * {@code INVALID_CONFIG} naming the key, and the subset of one fixed scenario is the one every
 * language must agree on. Subsets dealt by {@code subset.index} hold every invoker equally often
 * over consumers 0..C-1, so {@code random} and {@code roundrobin} take them (not {@code
 * subset.key}); their fixed scenario is shared with the other languages too. The choice itself is
 * tested in Rust (tests/beyond_dubbo/subset.rs).
 */
class SubsetTest {
    /**
     * The subset every language must agree on: invokers 1..20 at {@code 10.0.0.<id>:20880} with
     * {@code loadbalance=leastactive&subset.size=4&subset.key=consumer-42} (same key + addresses, same
     * subset in Rust, C, Java, Go and Python). Computed once from the Rust library; the Go and
     * Python tests assert the same literal.
     */
    static final Set<Long> CROSS_LANGUAGE_SUBSET = Set.of(6L, 11L, 15L, 18L);

    /**
     * The subsets dealt by index every language must agree on: invokers 1..20 at {@code
     * 10.0.0.<id>:20880} (default weight) with {@code
     * loadbalance=random&subset.size=4&subset.index=<i>}. Computed once from the Rust library; the
     * Go (subset_test.go) and Python (test_subset.py) tests assert the same literal, and they must
     * agree.
     */
    static final Map<Long, Set<Long>> CROSS_LANGUAGE_INDEXED_SUBSETS = Map.of(
            0L, Set.of(5L, 7L, 11L, 14L),
            1L, Set.of(4L, 10L, 12L, 17L),
            7L, Set.of(2L, 4L, 7L, 11L));

    private static final Pattern ROW =
            Pattern.compile("\\{\"id\":(\\d+),\"address\":\"([^\"]*)\"[^\\[]*?\"in_subset\":(true|false)");

    /** Ids of the stats rows, each mapped to its in_subset mark. */
    static Map<Long, Boolean> marks(String statsJson) {
        Map<Long, Boolean> out = new HashMap<>();
        Matcher m = ROW.matcher(statsJson);
        while (m.find()) {
            out.put(Long.parseLong(m.group(1)), Boolean.parseBoolean(m.group(3)));
        }
        return out;
    }

    static Set<Long> inSubset(Balancer lb) {
        Map<Long, Boolean> marks = marks(lb.statsJson());
        Set<Long> ids = new TreeSet<>();
        marks.forEach((id, in) -> {
            if (in) {
                ids.add(id);
            }
        });
        return ids;
    }

    private static List<Invoker> fleet(int n) {
        List<Invoker> list = new ArrayList<>();
        for (int i = 1; i <= n; i++) {
            list.add(Invoker.of(i, "10.0.0." + i + ":20880"));
        }
        return list;
    }

    @Test
    void picksStayInTheSubsetAndUseAllOfIt() {
        final int draws = 3000;
        for (String strategy : List.of("p2c", "leastactive")) {
            try (Balancer lb = new Balancer("loadbalance=" + strategy + "&subset.size=3&subset.key=h1&seed=11")) {
                lb.update(fleet(12));
                assertEquals(12, marks(lb.statsJson()).size(), "every row carries in_subset: " + lb.statsJson());
                Set<Long> members = inSubset(lb);
                assertEquals(3, members.size(), strategy + ": " + members);
                Map<Long, Integer> counts = new HashMap<>();
                for (int i = 0; i < draws; i++) {
                    long id = lb.select(Balancer.SERVICE_METHOD);
                    lb.report(Balancer.SERVICE_METHOD, id, 1000, Outcome.SUCCESS);
                    assertTrue(members.contains(id), strategy + ": picked " + id + " outside " + members);
                    counts.merge(id, 1, Integer::sum);
                }
                assertEquals(members, counts.keySet(), strategy + ": the whole subset serves");
                if (strategy.equals("p2c")) {
                    // A third each; 5 binomial standard deviations.
                    double p = 1.0 / 3, tolerance = 5 * Math.sqrt(draws * p * (1 - p));
                    counts.forEach((id, n) -> assertTrue(Math.abs(n - draws * p) <= tolerance, counts.toString()));
                }
            }
        }
    }

    /** The addresses a fresh balancer with {@code key} marks in_subset. */
    private static Set<String> subsetAddresses(String key, List<Invoker> set) {
        try (Balancer lb = new Balancer("loadbalance=leastactive&subset.size=3&subset.key=" + key)) {
            lb.update(set);
            Map<Long, String> address = new HashMap<>();
            set.forEach(inv -> address.put(inv.id(), inv.address()));
            Set<String> out = new TreeSet<>();
            inSubset(lb).forEach(id -> out.add(address.get(id)));
            return out;
        }
    }

    @Test
    void theSubsetIsTheKeyAndTheAddressesNotTheIdsOrOrder() {
        Set<String> chosen = subsetAddresses("h1", fleet(12));
        assertEquals(3, chosen.size(), chosen.toString());
        assertEquals(chosen, subsetAddresses("h1", fleet(12)), "same key and set");
        List<Invoker> renamed = new ArrayList<>();
        for (int i = 12; i >= 1; i--) {
            renamed.add(Invoker.of(5000 + i, "10.0.0." + i + ":20880"));
        }
        assertEquals(chosen, subsetAddresses("h1", renamed), "same addresses under other ids, reversed");
        // h2: a fixed key known to give another subset of these 12 addresses.
        Set<String> other = subsetAddresses("h2", fleet(12));
        assertEquals(3, other.size());
        assertNotEquals(chosen, other);
    }

    @Test
    void aFailoverStaysInTheSubsetUntilItsMembersAreExcluded() {
        try (Balancer lb = new Balancer("loadbalance=leastactive&subset.size=3&subset.key=h1&seed=5")) {
            lb.update(fleet(12));
            List<Long> members = new ArrayList<>(inSubset(lb));
            long[] everyone = new long[12];
            for (int i = 0; i < 12; i++) {
                everyone[i] = i + 1;
            }
            for (int trial = 0; trial < 200; trial++) {
                List<Long> tried = new ArrayList<>();
                for (int k = 0; k < 3; k++) {
                    tried.add(members.get((trial + k) % 3));
                    long[] excluded = tried.stream().mapToLong(Long::longValue).toArray();
                    for (long[] candidates : new long[][] {null, everyone}) {
                        long id = lb.selectAmong(Balancer.SERVICE_METHOD, null, candidates, excluded);
                        lb.report(Balancer.SERVICE_METHOD, id, 1000, Outcome.SUCCESS);
                        assertFalse(tried.contains(id), "picked " + id + ", excluded " + tried);
                        if (tried.size() < members.size()) {
                            assertTrue(members.contains(id), "left " + members + " with " + tried + " excluded: " + id);
                        } else {
                            assertFalse(members.contains(id), "every member excluded, yet picked " + id);
                        }
                    }
                }
            }
        }
    }

    /** Each config of {@code cases} is refused with INVALID_CONFIG, the message naming the key it maps to. */
    private static void assertRejectedNamingTheKey(Map<String, String> cases) {
        cases.forEach((config, key) -> {
            PolylbException e = assertThrows(PolylbException.class, () -> new Balancer(config).close(), config);
            assertEquals(Status.INVALID_CONFIG, e.status(), config);
            assertTrue(e.getMessage().contains(key), config + ": " + e.getMessage());
        });
    }

    @Test
    void rejectedConfigsAreInvalidConfigNamingTheKey() {
        assertRejectedNamingTheKey(Map.of(
                "loadbalance=maglev&subset.size=3&subset.key=a", "subset.size",
                "loadbalance=rendezvous&subset.size=3&subset.key=a", "subset.size",
                "loadbalance=consistenthash&subset.size=3&subset.key=a", "subset.size",
                "loadbalance=random&subset.size=3&subset.key=a", "subset.size",
                "loadbalance=roundrobin&subset.size=3&subset.key=a", "subset.size",
                "loadbalance=leastactive&subset.size=3", "subset.key",
                "loadbalance=leastactive&subset.key=a", "subset.key",
                "loadbalance=leastactive&subset.size=3&subset.key=a&subset.minHealthyPercent=50", "subset.minHealthyPercent"));
    }

    @Test
    void theCrossLanguageSubset() {
        try (Balancer lb = new Balancer("loadbalance=leastactive&subset.size=4&subset.key=consumer-42")) {
            lb.update(fleet(20));
            assertEquals(new TreeSet<>(CROSS_LANGUAGE_SUBSET), inSubset(lb),
                    "the subset every language must agree on");
        }
    }

    /** What a fresh balancer with {@code strategy} and subset.size/subset.index marks over ids 1..n. */
    private static Set<Long> indexedSubset(String strategy, int size, long index, int n) {
        try (Balancer lb = new Balancer(
                "loadbalance=" + strategy + "&subset.size=" + size + "&subset.index=" + index)) {
            lb.update(fleet(n));
            assertEquals(n, marks(lb.statsJson()).size(), "every row carries in_subset: " + lb.statsJson());
            return inSubset(lb);
        }
    }

    @Test
    void theCrossLanguageSubsetsByIndex() {
        CROSS_LANGUAGE_INDEXED_SUBSETS.forEach((index, want) -> assertEquals(new TreeSet<>(want),
                indexedSubset("random", 4, index, 20),
                "subset.index=" + index + ": the subset every language must agree on"));
    }

    @Test
    void subsetsByIndexHoldEveryInvokerEquallyOften() {
        // 25 consumers x 4 places = 100 places over 20 invokers: each in exactly 5 subsets.
        Map<Long, Integer> held = new TreeMap<>();
        for (long index = 0; index < 25; index++) {
            Set<Long> members = indexedSubset("random", 4, index, 20);
            assertEquals(4, members.size(), "consumer " + index + ": " + members);
            members.forEach(id -> held.merge(id, 1, Integer::sum));
        }
        Map<Long, Integer> want = new TreeMap<>();
        for (long id = 1; id <= 20; id++) {
            want.put(id, 5);
        }
        assertEquals(want, held, "subsets holding each invoker");
    }

    @Test
    void randomAndRoundRobinTakeSubsetsByIndex() {
        Set<Long> expected = indexedSubset("leastactive", 4, 5, 12);
        assertEquals(4, expected.size(), expected.toString());
        for (String strategy : List.of("random", "roundrobin")) {
            try (Balancer lb = new Balancer("loadbalance=" + strategy + "&subset.size=4&subset.index=5&seed=1")) {
                lb.update(fleet(12));
                Set<Long> members = inSubset(lb);
                assertEquals(expected, members, strategy + ": the index's subset, whatever the strategy");
                Set<Long> seen = new TreeSet<>();
                for (int i = 0; i < 2000; i++) {
                    long id = lb.select(Balancer.SERVICE_METHOD);
                    lb.report(Balancer.SERVICE_METHOD, id, 1000, Outcome.SUCCESS);
                    assertTrue(members.contains(id), strategy + ": picked " + id + " outside " + members);
                    seen.add(id);
                }
                assertEquals(members, seen, strategy + ": the whole subset serves");
            }
        }
    }

    @Test
    void rejectedIndexConfigsAreInvalidConfigNamingTheKey() {
        assertRejectedNamingTheKey(Map.of(
                "loadbalance=random&subset.size=3&subset.key=a", "subset.size",
                "loadbalance=leastactive&subset.size=3&subset.key=a&subset.index=1", "subset.index",
                "loadbalance=random&subset.size=3&subset.key=a&subset.index=1", "subset.index",
                "loadbalance=maglev&subset.size=3&subset.index=1", "subset.size",
                "loadbalance=random&subset.index=1", "subset.index",
                "loadbalance=random&subset.size=3&subset.index=-1", "subset.index",
                "loadbalance=random&subset.size=3&subset.index=4294967296", "subset.index"));
        assertEquals(4, indexedSubset("random", 4, 4294967295L, 20).size(), "the largest index");
    }
}
