package io.polylb;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** {@code rendezvous} (weighted rendezvous hashing) through the Java API, with the library's own core. */
class RendezvousTest {
    /**
     * The cross-language contract: invokers 1..8 at 10.0.0.&lt;id&gt;:20880, weight 100 each, key
     * "user-&lt;i&gt;" (UTF-8) goes to this id. Computed once from the Rust library; the Go
     * (rendezvous_test.go) and Python (test_rendezvous.py) tests assert the same, and all must
     * agree.
     */
    static final long[] CROSS_LANGUAGE_PICKS = {2, 6, 7, 2, 1, 6, 8, 3, 8, 3};

    /** Invokers 1..n at 10.0.0.1..n:20880 with the given weights. */
    private static List<Invoker> invokers(int... weights) {
        List<Invoker> list = new ArrayList<>();
        for (int i = 0; i < weights.length; i++) {
            list.add(Invoker.of(i + 1, "10.0.0." + (i + 1) + ":20880").withWeight(weights[i]));
        }
        return list;
    }

    private static List<Invoker> without(List<Invoker> set, long... ids) {
        List<Invoker> rest = new ArrayList<>();
        for (Invoker inv : set) {
            boolean gone = false;
            for (long id : ids) {
                gone |= inv.id() == id;
            }
            if (!gone) {
                rest.add(inv);
            }
        }
        return rest;
    }

    private static byte[] key(int k) {
        return ("user-" + k).getBytes(StandardCharsets.UTF_8);
    }

    /** A pick for {@code key} among all but {@code excluded} (null: none), reported at once. */
    private static long pick(Balancer lb, byte[] key, long[] excluded) {
        long id = lb.selectAmong(0, key, null, excluded);
        lb.report(0, id, 10, Outcome.SUCCESS);
        return id;
    }

    /** The picks of keys user-0 … user-(n-1). */
    private static long[] picks(Balancer lb, int n) {
        long[] out = new long[n];
        for (int k = 0; k < n; k++) {
            out[k] = pick(lb, key(k), null);
        }
        return out;
    }

    private static void assertBinomial(int count, int draws, double p, String what) {
        double sigma = Math.sqrt(draws * p * (1 - p));
        assertTrue(Math.abs(count - draws * p) <= 5 * sigma,
                what + ": " + count + " of " + draws + ", expected " + draws * p + " ± " + 5 * sigma + " (5σ)");
    }

    @Test
    void theCrossLanguagePicks() {
        try (Balancer lb = new Balancer("loadbalance=rendezvous")) {
            assertEquals("rendezvous", lb.strategy());
            lb.update(invokers(100, 100, 100, 100, 100, 100, 100, 100));
            assertArrayEquals(CROSS_LANGUAGE_PICKS, picks(lb, CROSS_LANGUAGE_PICKS.length));
            int m = lb.method("get");
            for (int k = 0; k < CROSS_LANGUAGE_PICKS.length; k++) {
                long id = lb.selectByKey(m, "user-" + k);
                lb.report(m, id, 10, Outcome.SUCCESS);
                assertEquals(CROSS_LANGUAGE_PICKS[k], id, "the string form hashes as its UTF-8 bytes");
            }
            assertTrue(lb.statsJson().contains("\"active\":0"), lb.statsJson());
        }
    }

    /** Each key is a draw with exactly its invoker's share of the weight (20 000 fixed keys, 5σ). */
    @Test
    void keysAreSharedOutExactlyAsTheWeightsSay() {
        int draws = 20_000;
        try (Balancer lb = new Balancer("loadbalance=rendezvous")) {
            lb.update(invokers(100, 200, 300, 400, 0));
            int[] counts = new int[6];
            for (long id : picks(lb, draws)) {
                counts[(int) id]++;
            }
            assertEquals(0, counts[5], "weight 0 takes no key while the others weigh more");
            for (int id = 1; id <= 4; id++) {
                assertBinomial(counts[id], draws, id / 10.0, "id " + id);
            }
            // A weight of 1 beside 99 keeps its 1 %: no table or ring rounds it away.
            lb.update(invokers(99, 1));
            int light = 0;
            for (long id : picks(lb, draws)) {
                light += id == 2 ? 1 : 0;
            }
            assertBinomial(light, draws, 0.01, "weight 1 of 100");
        }
    }

    @Test
    void keysFollowAddressesNotIdsOrOrder() {
        List<Invoker> set = invokers(100, 200, 100, 300, 100, 100);
        List<Invoker> reversed = new ArrayList<>();
        for (int i = set.size() - 1; i >= 0; i--) {
            Invoker inv = set.get(i);
            reversed.add(Invoker.of(inv.id() + 100, inv.address()).withWeight(inv.weight()));
        }
        try (Balancer a = new Balancer("loadbalance=rendezvous");
                Balancer b = new Balancer("loadbalance=rendezvous&seed=9")) {
            a.update(set);
            b.update(reversed);
            long[] pa = picks(a, 2000);
            long[] pb = picks(b, 2000);
            for (int k = 0; k < pa.length; k++) {
                assertEquals(pa[k] + 100, pb[k], "user-" + k);
            }
        }
    }

    /** A leaving invoker moves only its own keys; back, it takes exactly them; a newcomer only its share. */
    @Test
    void churnMovesOnlyTheKeysItMust() {
        int keys = 5000;
        int[] tens = new int[10];
        java.util.Arrays.fill(tens, 100);
        List<Invoker> set = invokers(tens);
        try (Balancer lb = new Balancer("loadbalance=rendezvous")) {
            lb.update(set);
            long[] before = picks(lb, keys);
            lb.update(without(set, 4));
            long[] after = picks(lb, keys);
            Set<Long> heirs = new HashSet<>();
            for (int k = 0; k < keys; k++) {
                assertNotEquals(4, after[k], "user-" + k + " still on the invoker that left");
                if (before[k] == 4) {
                    heirs.add(after[k]);
                } else {
                    assertEquals(before[k], after[k], "user-" + k + " moved though its invoker stayed");
                }
            }
            assertEquals(9, heirs.size(), "its keys spread over all the others: " + heirs);
            lb.update(set);
            assertArrayEquals(before, picks(lb, keys), "the keys came back with their invoker");
            List<Invoker> grown = new ArrayList<>(set);
            grown.add(Invoker.of(11, "10.0.0.11:20880"));
            lb.update(grown);
            long[] withNew = picks(lb, keys);
            int taken = 0;
            for (int k = 0; k < keys; k++) {
                if (withNew[k] == 11) {
                    taken++;
                } else {
                    assertEquals(before[k], withNew[k], "user-" + k + " moved between invokers that stayed");
                }
            }
            assertBinomial(taken, keys, 1.0 / 11, "the newcomer's keys");
        }
    }

    /**
     * A failover's retry (the exclusion API) is where a consumer whose set lacks the failed invoker
     * sends the key, so every consumer's retry of a key lands together; a second retry is the third
     * choice; excluding a bystander leaves the key where it was.
     */
    @Test
    void aFailoverTakesTheKeysNextChoice() {
        List<Invoker> set = invokers(120, 140, 160, 180, 200, 220);
        try (Balancer lb = new Balancer("loadbalance=rendezvous")) {
            lb.update(set);
            for (int k = 0; k < 300; k++) {
                long first = lb.select(0, key(k));
                lb.report(0, first, 1000, Outcome.FAILURE);
                long retry = pick(lb, key(k), new long[] {first});
                long third = pick(lb, key(k), new long[] {first, retry});
                try (Balancer other = new Balancer("loadbalance=rendezvous")) {
                    other.update(without(set, first));
                    assertEquals(pick(other, key(k), null), retry, "user-" + k);
                    other.update(without(set, first, retry));
                    assertEquals(pick(other, key(k), null), third, "user-" + k);
                }
                long bystander = first % 6 + 1;
                assertEquals(first, pick(lb, key(k), new long[] {bystander}), "user-" + k);
                assertEquals(first, lb.selectAmong(0, key(k), new long[] {retry, first}, null));
                lb.report(0, first, 10, Outcome.SUCCESS);
            }
            assertTrue(lb.statsJson().contains("\"active\":0") && !lb.statsJson().contains("\"active\":1"),
                    lb.statsJson());
        }
    }

    @Test
    void optionsItCannotHonourAreRefused() {
        for (String[] c : new String[][] {
            {"loadbalance=rendezvous&slowstart.windowMs=1000", "slowstart"},
            {"loadbalance=rendezvous&subset.size=3&subset.key=c1", "subset"},
            {"loadbalance=rendezvous&maglev.tableSize=101", "maglev"},
        }) {
            PolylbException e = assertThrows(PolylbException.class, () -> new Balancer(c[0]).close(), c[0]);
            assertEquals(Status.INVALID_CONFIG, e.status(), c[0]);
            assertTrue(e.getMessage().contains(c[1]), c[0] + ": " + e.getMessage());
        }
    }

    @Test
    void invokersNeedAnAddressAndARefusedUpdateKeepsTheSet() {
        try (Balancer lb = new Balancer("loadbalance=rendezvous")) {
            lb.update(invokers(100, 100));
            long[] before = picks(lb, 100);
            PolylbException e = assertThrows(PolylbException.class,
                    () -> lb.update(List.of(Invoker.of(1, "10.0.0.1:20880"), Invoker.of(2, ""))));
            assertEquals(Status.INVALID_ARGUMENT, e.status());
            assertArrayEquals(before, picks(lb, 100));
        }
    }
}
