package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
import org.junit.jupiter.api.Test;

/** {@code maglev} (weighted Maglev hashing) through the Java API, with the library's own core. */
class MaglevTest {
    /** Invokers 1..n at 10.0.0.1..n:20880 with the given weights. */
    private static List<Invoker> invokers(int... weights) {
        List<Invoker> list = new ArrayList<>();
        for (int i = 0; i < weights.length; i++) {
            list.add(Invoker.of(i + 1, "10.0.0." + (i + 1) + ":20880").withWeight(weights[i]));
        }
        return list;
    }

    private static byte[] key(int k) {
        return ("user-" + k).getBytes(StandardCharsets.UTF_8);
    }

    /** A pick for {@code key} that is never sent (so nothing stays in flight). */
    private static long pick(Balancer lb, int m, byte[] key) {
        long id = lb.select(m, key);
        lb.report(m, id, 1, Outcome.CANCELLED);
        return id;
    }

    private static long pickAmong(Balancer lb, int m, byte[] key, long[] candidates, long[] excluded) {
        long id = lb.selectAmong(m, key, candidates, excluded);
        lb.report(m, id, 1, Outcome.CANCELLED);
        return id;
    }

    @Test
    void maglevIsStablePerKeyAndSpreadsKeys() {
        try (Balancer lb = new Balancer("loadbalance=maglev")) {
            assertEquals("maglev", lb.strategy());
            lb.update(invokers(100, 100, 100, 100, 100));
            int m = lb.method("get");
            Map<Long, Integer> keysPerInvoker = new HashMap<>();
            for (int k = 0; k < 500; k++) {
                long first = lb.select(m, key(k));
                lb.report(m, first, 10, Outcome.SUCCESS);
                long again = lb.select(m, key(k));
                lb.report(m, again, 10, Outcome.SUCCESS);
                assertEquals(first, again, "user-" + k);
                assertEquals(first, lb.selectByKey(m, "user-" + k), "the string form hashes as its UTF-8 bytes");
                lb.report(m, first, 10, Outcome.CANCELLED);
                keysPerInvoker.merge(first, 1, Integer::sum);
            }
            assertEquals(5, keysPerInvoker.size(), keysPerInvoker.toString());
            // 100 keys each on average: none far from it (binomial sd 9).
            keysPerInvoker.values().forEach(n -> assertTrue(n > 50 && n < 150, keysPerInvoker.toString()));
            // Outcomes and calls in flight do not move keys (the table follows the set only).
            long held = lb.select(m, key(0));
            for (int i = 0; i < 20; i++) {
                assertEquals(held, pick(lb, m, key(0)), "a key moved while its invoker had calls in flight");
            }
            lb.report(m, held, 1, Outcome.FAILURE);
            assertTrue(lb.statsJson().contains("\"active\":0"), lb.statsJson());
        }
    }

    @Test
    void anExcludedInvokersKeysGoElsewhereAndOtherKeysStayPut() {
        try (Balancer lb = new Balancer("loadbalance=maglev")) {
            lb.update(invokers(100, 100, 100, 100, 100));
            int m = lb.method("get");
            long[] owner = new long[500];
            for (int k = 0; k < owner.length; k++) {
                owner[k] = pick(lb, m, key(k));
            }
            for (long out = 1; out <= 5; out++) {
                long[] others = new long[4];
                int n = 0;
                for (long id = 1; id <= 5; id++) {
                    if (id != out) {
                        others[n++] = id;
                    }
                }
                int moved = 0;
                Set<Long> movedTo = new HashSet<>();
                for (int k = 0; k < owner.length; k++) {
                    long excluded = pickAmong(lb, m, key(k), null, new long[] {out});
                    long amongOthers = pickAmong(lb, m, key(k), others, null);
                    assertEquals(excluded, amongOthers, "excluding " + out + " or naming the others as candidates");
                    if (owner[k] == out) {
                        assertNotEquals(out, excluded, "user-" + k + " stayed on the excluded invoker");
                        assertEquals(excluded, pickAmong(lb, m, key(k), null, new long[] {out}),
                                "a moved key goes to one invoker every time");
                        moved++;
                        movedTo.add(excluded);
                    } else {
                        assertEquals(owner[k], excluded, "user-" + k + " moved though its invoker was a candidate");
                    }
                }
                assertTrue(moved > 0, "no key on invoker " + out);
                assertTrue(movedTo.size() > 1, "the keys of invoker " + out + " all went to one other: " + movedTo);
            }
            // Only the key's own invoker as candidate: that invoker.
            for (int k = 0; k < 50; k++) {
                assertEquals(owner[k], pickAmong(lb, m, key(k), new long[] {owner[k]}, null));
            }
        }
    }

    /**
     * The table is a function of the set's addresses and weights: another consumer with the same
     * providers, listed in another order under other ids, maps every key to the same address.
     */
    @Test
    void keysFollowAddressesNotIdsOrOrder() {
        try (Balancer a = new Balancer("loadbalance=maglev");
                Balancer b = new Balancer("loadbalance=maglev")) {
            List<Invoker> set = invokers(100, 200, 100, 300, 100, 100);
            a.update(set);
            List<Invoker> reordered = new ArrayList<>();
            Map<Long, String> addressOfB = new HashMap<>();
            for (int i = set.size() - 1; i >= 0; i--) {
                Invoker inv = set.get(i);
                long id = 1000 + 7L * i;
                reordered.add(Invoker.of(id, inv.address()).withWeight(inv.weight()));
                addressOfB.put(id, inv.address());
            }
            b.update(reordered);
            int ma = a.method("get");
            int mb = b.method("get");
            for (int k = 0; k < 1000; k++) {
                String expected = set.get((int) pick(a, ma, key(k)) - 1).address();
                assertEquals(expected, addressOfB.get(pick(b, mb, key(k))), "user-" + k);
            }
        }
    }

    @Test
    void keysAreSharedOutInProportionToWeight() {
        try (Balancer lb = new Balancer("loadbalance=maglev")) {
            lb.update(invokers(100, 100, 200, 0));
            int m = lb.method("get");
            int[] counts = new int[5];
            int keys = 4000;
            for (int k = 0; k < keys; k++) {
                counts[(int) pick(lb, m, key(k))]++;
            }
            assertEquals(0, counts[4], "an invoker of weight 0 owns no slot");
            // Expected 1000, 1000, 2000; 5 binomial standard deviations (27, 27, 32).
            assertTrue(Math.abs(counts[1] - 1000) < 140, "weight 100: " + counts[1]);
            assertTrue(Math.abs(counts[2] - 1000) < 140, "weight 100: " + counts[2]);
            assertTrue(Math.abs(counts[3] - 2000) < 160, "weight 200: " + counts[3]);
        }
    }

    @Test
    void aRemovedInvokerMovesItsKeysAndFewOthers() {
        try (Balancer lb = new Balancer("loadbalance=maglev")) {
            int[] weights = new int[10];
            java.util.Arrays.fill(weights, 100);
            List<Invoker> set = invokers(weights);
            lb.update(set);
            int m = lb.method("get");
            int keys = 5000;
            long[] before = new long[keys];
            for (int k = 0; k < keys; k++) {
                before[k] = pick(lb, m, key(k));
            }
            lb.update(set.subList(0, 9)); // invoker 10 leaves: the table is rebuilt
            int others = 0;
            int othersMoved = 0;
            for (int k = 0; k < keys; k++) {
                long now = pick(lb, m, key(k));
                assertNotEquals(10, now);
                if (before[k] != 10) {
                    others++;
                    if (now != before[k]) {
                        othersMoved++;
                    }
                }
            }
            // The docs: "a removed invoker moves its own keys and a few per cent of the others".
            assertTrue(othersMoved * 100 < others * 5,
                    othersMoved + " of " + others + " keys moved though their invoker stayed");
        }
    }

    @Test
    void tableSizeMustBeAPrimeInRange() {
        PolylbException notPrime = assertThrows(PolylbException.class,
                () -> new Balancer("loadbalance=maglev&maglev.tableSize=65536"));
        assertEquals(Status.INVALID_CONFIG, notPrime.status());
        assertTrue(notPrime.getMessage().contains("maglev.tableSize"), notPrime.getMessage());
        assertTrue(notPrime.getMessage().contains("not a prime"), notPrime.getMessage());
        for (String outside : List.of("5", "16777259", "0", "-7")) {
            PolylbException e = assertThrows(PolylbException.class,
                    () -> new Balancer("loadbalance=maglev&maglev.tableSize=" + outside), outside);
            assertEquals(Status.INVALID_CONFIG, e.status(), outside);
            assertTrue(e.getMessage().contains("maglev.tableSize"), e.getMessage());
        }
        PolylbException range = assertThrows(PolylbException.class,
                () -> new Balancer("loadbalance=maglev&maglev.tableSize=5"));
        assertTrue(range.getMessage().contains("7..=16777213"), range.getMessage());
        // The key belongs to maglev; slowstart.* does not apply to it.
        assertEquals(Status.INVALID_CONFIG, assertThrows(PolylbException.class,
                () -> new Balancer("loadbalance=consistenthash&maglev.tableSize=7")).status());
        PolylbException slowStart = assertThrows(PolylbException.class,
                () -> new Balancer("loadbalance=maglev&slowstart.windowMs=1000"));
        assertEquals(Status.INVALID_CONFIG, slowStart.status());
        assertTrue(slowStart.getMessage().contains("slowstart.windowMs"), slowStart.getMessage());
        // Primes at both ends of the range are accepted.
        try (Balancer small = new Balancer("loadbalance=maglev&maglev.tableSize=7");
                Balancer large = new Balancer("loadbalance=maglev&maglev.tableSize=16777213")) {
            assertEquals("maglev", small.strategy());
            assertEquals("maglev", large.strategy());
        }
    }

    @Test
    void moreInvokersThanSlotsIsRejectedAndTheSetKept() {
        try (Balancer lb = new Balancer("loadbalance=maglev&maglev.tableSize=7")) {
            lb.update(invokers(100, 100, 100, 100, 100, 100, 100)); // 7 invokers, 7 slots: fits
            int m = lb.method("get");
            Set<Long> seen = new HashSet<>();
            for (int k = 0; k < 200; k++) {
                seen.add(pick(lb, m, key(k)));
            }
            assertEquals(7, seen.size(), "each of 7 invokers owns one of 7 slots");
            PolylbException e = assertThrows(PolylbException.class,
                    () -> lb.update(invokers(100, 100, 100, 100, 100, 100, 100, 100)));
            assertEquals(Status.LIMIT_EXCEEDED, e.status());
            assertTrue(e.getMessage().contains("maglev.tableSize"), e.getMessage());
            // A rejected update changes nothing.
            for (int k = 0; k < 200; k++) {
                assertTrue(pick(lb, m, key(k)) <= 7);
            }
        }
    }

    @Test
    void invokersNeedAnAddress() {
        try (Balancer lb = new Balancer("loadbalance=maglev")) {
            PolylbException e = assertThrows(PolylbException.class,
                    () -> lb.update(List.of(Invoker.of(1, "10.0.0.1:20880"), Invoker.of(2, ""))));
            assertEquals(Status.INVALID_ARGUMENT, e.status());
        }
    }
}
