package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.SERVICE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.polylb.Balancer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.loadbalance.ConsistentHashLoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.RoundRobinLoadBalance;
import org.apache.dubbo.rpc.cluster.router.state.BitList;
import org.junit.jupiter.api.Test;

/**
 * Randomized differential tests: polylb through the Dubbo adapter against the real dubbo-cluster
 * classes (org.apache.dubbo:dubbo 3.3.6) in the same JVM, over inputs drawn from fixed seeds.
 * Each case has its own seed, printed on failure with the inputs and the history of list changes;
 * {@code -Ddiff.case=rr:<seed>} (or {@code rro:}, {@code ch:}, {@code chx:}) runs one case alone
 * through {@link #oneCase}.
 *
 * <p>Covered: consistenthash (1 to 40 providers, repeated hosts, ports, no port, two protocols at
 * one address, hash.nodes 4 to 403, hash.arguments lists at method or service level, arguments of
 * mixed types, generic calls, routed subsets, reordered lists, removal and re-add; hash.nodes
 * below 4 fails in both), roundrobin (1 to 16 providers with zero, negative, default and huge
 * weights, constant warm-up weights, method-level weights, up to three methods interleaved,
 * providers removed, re-added, added, re-weighted, routed subsets, reordered lists, plain lists and
 * router BitLists), getWeight's warm-up (random weight, uptime, warm-up inputs with their edges),
 * and fixed cases of the list-order rule. Lists are never changed in place once handed to a
 * balancer (Dubbo hands out a new list per change; the adapter remembers lists by identity).
 * Round robin's 60 s recycling is not driven (real time): every case ends well within it.
 */
class DubboDifferentialTest extends AdapterTest {
    private static final long SEED = 20261202L;

    private static final String[] HOSTS = {"10.0.0.1", "10.0.0.2", "10.0.3.7", "192.168.1.20", "172.16.254.3",
        "127.0.0.1", "provider-a.example.com", "provider-b", "b\u00fccher.example", "node-\u4e2d\u6587",
        "10.10.10.10", "8.8.8.8"};
    private static final String[] HASH_ARGUMENTS = {"0", "1", "0,1", "1,0", "0,2", "2", "2,0,1", "0, 1", "-1,0",
        "5", "0,0", "1,,0"};
    private static final String[] METHODS = {"sayHello", "findUser", "get", "list"};

    // ------------------------------------------------------------------------------------------
    // consistenthash
    // ------------------------------------------------------------------------------------------

    @Test
    void consistentHashEqualsDubboOnRandomRingsKeysAndLists() {
        SplittableRandom master = new SplittableRandom(SEED);
        int selects = 0;
        for (int c = 0; c < 160; c++) {
            selects += consistentHashCase(master.nextLong(), false);
        }
        assertTrue(selects > 20_000, "selects compared: " + selects);
    }

    @Test
    void consistentHashEqualsDubboOnRepeatedAddressesAndReorderedLists() {
        SplittableRandom master = new SplittableRandom(SEED + 1);
        int selects = 0;
        for (int c = 0; c < 60; c++) {
            selects += consistentHashCase(master.nextLong(), true);
        }
        assertTrue(selects > 5_000, "selects compared: " + selects);
    }

    /** One random ring; returns the number of selects compared. */
    private int consistentHashCase(long caseSeed, boolean orderAndRepeats) {
        SplittableRandom r = new SplittableRandom(caseSeed);
        int n = 1 + r.nextInt(40);
        String method = METHODS[r.nextInt(METHODS.length)];
        StringBuilder common = new StringBuilder("side=provider");
        String nodes = null;
        if (r.nextInt(5) != 0) {
            int v = switch (r.nextInt(4)) {
                case 0 -> 4 + r.nextInt(4); // 4..7
                case 1 -> 4 + r.nextInt(60);
                case 2 -> 4 * (1 + r.nextInt(100));
                default -> 4 + r.nextInt(400);
            };
            nodes = Integer.toString(v);
        }
        String args = r.nextInt(4) == 0 ? null : HASH_ARGUMENTS[r.nextInt(HASH_ARGUMENTS.length)];
        boolean methodLevel = r.nextInt(4) == 0;
        String prefix = methodLevel ? method + "." : "";
        if (nodes != null) {
            common.append('&').append(prefix).append("hash.nodes=").append(nodes);
        }
        if (args != null) {
            common.append('&').append(prefix).append("hash.arguments=").append(args);
        }
        if (methodLevel && r.nextBoolean()) {
            // Service-level values the method-level ones hide.
            common.append("&hash.nodes=8&hash.arguments=1");
        }
        List<Invoker<Object>> all = new ArrayList<>();
        java.util.Set<String> identities = new java.util.HashSet<>();
        while (all.size() < n) {
            String host = HOSTS[r.nextInt(orderAndRepeats ? 3 : HOSTS.length)];
            int port = switch (r.nextInt(6)) {
                case 0 -> 20880;
                case 1 -> 0; // no port: the ring address is the host alone
                default -> 1 + r.nextInt(65535);
            };
            String protocol = orderAndRepeats && r.nextInt(3) == 0 ? "tri" : "dubbo";
            if (orderAndRepeats && !all.isEmpty() && r.nextInt(3) == 0) {
                // The same host:port as an earlier provider, under another protocol: the same
                // ring address, so every point collides and Dubbo's later put wins.
                URL earlier = all.get(r.nextInt(all.size())).getUrl();
                host = earlier.getHost();
                port = earlier.getPort();
                protocol = "dubbo".equals(earlier.getProtocol()) ? "tri" : "dubbo";
            }
            // Parameters on other providers than the first are ignored by both.
            String params = all.isEmpty() || r.nextInt(3) != 0 ? common.toString() : "side=provider&hash.nodes=12";
            TestInvokers.FakeInvoker invoker = provider(protocol, host, port, params);
            if (identities.add(invoker.getUrl().toIdentityString())) {
                all.add(invoker);
            }
        }
        StringBuilder history = new StringBuilder("consistenthash case seed ").append(caseSeed)
                .append("L, method ").append(method).append(", providers ").append(urls(all));
        ConsistentHashLoadBalance dubbo = new ConsistentHashLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        int keysPerList = 25 + r.nextInt(40);
        int compared = 0;
        List<Invoker<Object>> current = new ArrayList<>(all);
        int rounds = 4 + r.nextInt(4);
        for (int round = 0; round < rounds; round++) {
            if (round > 0) {
                int op = r.nextInt(orderAndRepeats ? 5 : 4);
                if (op == 0 && current.size() > 1) {
                    // A provider leaves (the registry destroys it), and comes back as a new object.
                    int i = r.nextInt(current.size());
                    current = new ArrayList<>(current); // a new list per change, as Dubbo's directory
                    Invoker<Object> gone = current.remove(i);
                    gone.destroy();
                    history.append("\n  round ").append(round).append(": without ")
                            .append(gone.getUrl().toIdentityString()).append(" (destroyed)");
                    compared += compareKeys(dubbo, polylb, current, method, r, keysPerList, history);
                    Invoker<Object> back = provider(gone.getUrl().getProtocol(), gone.getUrl().getHost(),
                            gone.getUrl().getPort(), queryOf(gone.getUrl()));
                    current = new ArrayList<>(current); // a new list per change, as Dubbo's directory
                    current.add(i, back);
                    history.append("; re-added as a new object at ").append(i);
                } else if (op == 1) {
                    List<Invoker<Object>> subset = new ArrayList<>();
                    for (Invoker<Object> invoker : current) {
                        if (r.nextInt(3) != 0) {
                            subset.add(invoker);
                        }
                    }
                    if (subset.isEmpty()) {
                        subset.add(current.get(r.nextInt(current.size())));
                    }
                    history.append("\n  round ").append(round).append(": routed subset ").append(identities(subset));
                    compared += compareKeys(dubbo, polylb, subset, method, r, keysPerList, history);
                    history.append("; full list again");
                } else if (op == 4) {
                    List<Invoker<Object>> shuffled = new ArrayList<>(current);
                    shuffle(shuffled, r);
                    history.append("\n  round ").append(round).append(": reordered ").append(identities(shuffled));
                    compared += compareKeys(dubbo, polylb, shuffled, method, r, keysPerList, history);
                    history.append("; original order again");
                } else {
                    history.append("\n  round ").append(round).append(": same list");
                }
            }
            compared += compareKeys(dubbo, polylb, current, method, r, keysPerList, history);
        }
        return compared;
    }

    private static String queryOf(URL url) {
        StringBuilder q = new StringBuilder();
        url.getParameters().forEach((k, v) -> q.append(q.length() == 0 ? "" : "&").append(k).append('=').append(v));
        return q.toString();
    }

    private static int compareKeys(ConsistentHashLoadBalance dubbo, PolylbLoadBalance polylb,
            List<Invoker<Object>> list, String method, SplittableRandom r, int keys, CharSequence description) {
        for (int k = 0; k < keys; k++) {
            Object[] args = randomArguments(r);
            boolean generic = r.nextInt(8) == 0;
            RpcInvocation inv = generic ? TestInvokers.genericCall(method, args) : TestInvokers.call(method, args);
            String what = "call " + (generic ? "$invoke " : "") + method + describe(args) + " over "
                    + identities(list) + "; " + description;
            Invoker<Object> expected;
            try {
                expected = dubbo.select(list, list.get(0).getUrl(), inv);
            } catch (RuntimeException e) {
                throw new AssertionError("Dubbo failed: " + what, e);
            }
            Invoker<Object> actual;
            try {
                actual = pick(polylb, list, inv);
            } catch (RuntimeException e) {
                throw new AssertionError("polylb failed: " + what, e);
            }
            if (expected != actual) {
                fail("consistenthash pick differs from Dubbo's: expected " + expected.getUrl().toIdentityString()
                        + ", polylb picked " + (actual == null ? null : actual.getUrl().toIdentityString())
                        + (list.contains(actual) ? "" : " (not in the list)") + "; " + what);
            }
        }
        return keys;
    }

    @Test
    void consistentHashRingsWithFewerThanFourNodesFailInBoth() {
        // Dubbo: hash.nodes / 4 == 0 digests, an empty ring, a NullPointerException at select.
        // polylb documents hash.nodes 4..=65536 and rejects it with an RpcException. With one
        // provider neither builds a ring: AbstractLoadBalance returns it.
        SplittableRandom r = new SplittableRandom(SEED + 2);
        for (String nodes : new String[] {"-8", "-1", "0", "1", "2", "3"}) {
            for (int n : new int[] {1, 2, 7}) {
                List<Invoker<Object>> list = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    list.add(provider("dubbo", HOSTS[i], 20880 + i, "hash.nodes=" + nodes));
                }
                RpcInvocation inv = TestInvokers.call("get", "key-" + r.nextInt(1000));
                String what = "hash.nodes=" + nodes + ", " + n + " providers";
                PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
                if (n == 1) {
                    assertSame(list.get(0), new ConsistentHashLoadBalance().select(list, list.get(0).getUrl(), inv),
                            what);
                    assertSame(list.get(0), pick(polylb, list, inv), what);
                    continue;
                }
                assertThrowsAny(() -> new ConsistentHashLoadBalance().select(list, list.get(0).getUrl(), inv),
                        "Dubbo, " + what);
                assertThrowsAny(() -> pick(polylb, list, inv), "polylb, " + what);
            }
        }
    }

    private static void assertThrowsAny(Runnable r, String what) {
        try {
            r.run();
        } catch (RuntimeException expected) {
            return;
        }
        fail("no exception: " + what);
    }

    /** 0 to 3 arguments of the types calls carry (String.valueOf of each is what both hash). */
    private static Object[] randomArguments(SplittableRandom r) {
        Object[] args = new Object[r.nextInt(4)];
        for (int i = 0; i < args.length; i++) {
            args[i] = randomArgument(r);
        }
        return args;
    }

    private static Object randomArgument(SplittableRandom r) {
        return switch (r.nextInt(14)) {
            case 0 -> null;
            case 1 -> r.nextInt();
            case 2 -> r.nextLong();
            case 3 -> r.nextDouble() * Math.pow(10, r.nextInt(12) - 4);
            case 4 -> r.nextBoolean();
            case 5 -> (char) ('A' + r.nextInt(58));
            case 6 -> "";
            case 7 -> "\u7528\u6237-" + r.nextInt(10_000); // CJK
            case 8 -> "cl\u00e9-\u00fc\u00df-" + r.nextInt(10_000);
            case 9 -> "emoji-\uD83D\uDE00-" + r.nextInt(1000);
            case 10 -> "cut-\uD83D-" + r.nextInt(100); // a lone surrogate: '?' in UTF-8
            case 11 -> List.of("a", r.nextInt(50));
            case 12 -> Long.toHexString(r.nextLong()) + Long.toHexString(r.nextLong());
            default -> "user-" + r.nextInt(100_000);
        };
    }

    private static String describe(Object[] args) {
        StringBuilder s = new StringBuilder("(");
        for (int i = 0; i < args.length; i++) {
            Object a = args[i];
            s.append(i == 0 ? "" : ", ");
            if (a == null) {
                s.append("null");
            } else if (a instanceof String) {
                s.append('"').append(escape((String) a)).append('"');
            } else {
                s.append(a.getClass().getSimpleName()).append(' ').append(escape(String.valueOf(a)));
            }
        }
        return s.append(')').toString();
    }

    private static String escape(String s) {
        StringBuilder out = new StringBuilder();
        for (char ch : s.toCharArray()) {
            if (ch < 0x20 || ch > 0x7e) {
                out.append(String.format("\\u%04x", (int) ch));
            } else {
                out.append(ch);
            }
        }
        return out.toString();
    }

    // ------------------------------------------------------------------------------------------
    // roundrobin
    // ------------------------------------------------------------------------------------------

    @Test
    void roundRobinEqualsDubboOnRandomWeightsMethodsAndProviderChurn() {
        SplittableRandom master = new SplittableRandom(SEED + 3);
        long picks = 0;
        for (int c = 0; c < 300; c++) {
            picks += roundRobinCase(master.nextLong(), false);
        }
        assertTrue(picks > 200_000, "picks compared: " + picks);
    }

    /**
     * Lists that hold every provider in another order (a directory's list after a refresh):
     * Dubbo walks the list in its order, so ties go to the earliest in it.
     */
    @Test
    void roundRobinEqualsDubboOnReorderedLists() {
        SplittableRandom master = new SplittableRandom(SEED + 4);
        long picks = 0;
        for (int c = 0; c < 80; c++) {
            picks += roundRobinCase(master.nextLong(), true);
        }
        assertTrue(picks > 40_000, "picks compared: " + picks);
    }

    /**
     * A provider's weight parameters: URL parameters, described in {@code what}. Method-level
     * weights only for {@code overridden} methods (see {@link #roundRobinCase}).
     */
    private static String randomWeightParams(SplittableRandom r, List<String> overridden, long now,
            StringBuilder what) {
        StringBuilder p = new StringBuilder("side=provider");
        int kind = r.nextInt(20);
        int weight;
        if (kind < 5) {
            weight = r.nextInt(11);
        } else if (kind < 12) {
            weight = r.nextInt(1001);
        } else if (kind < 14) {
            weight = 1 + r.nextInt(Integer.MAX_VALUE / 16);
        } else if (kind < 16) {
            weight = -1 - r.nextInt(1000);
        } else {
            weight = Integer.MIN_VALUE; // absent: Dubbo's default 100
        }
        if (weight != Integer.MIN_VALUE) {
            p.append("&weight=").append(weight);
            what.append("w=").append(weight);
        } else {
            what.append("w=default");
        }
        int warm = r.nextInt(12);
        boolean midStep = warm == 1 && weight >= 2 && weight <= 5000;
        for (String m : overridden) {
            // Not with a warm-up held mid-step: that step is the service-level weight's.
            if (!midStep && r.nextInt(3) == 0) {
                int mw = r.nextInt(4) == 0 ? r.nextInt(3) - 1 : 1 + r.nextInt(500);
                p.append('&').append(m).append(".weight=").append(mw);
                what.append(',').append(m).append(".w=").append(mw);
            }
        }
        if (warm == 0) {
            // A start time in the future (clock skew): weight 1 while it lasts (an hour here).
            long timestamp = now + 3_600_000L + r.nextInt(1_000_000);
            p.append("&timestamp=").append(timestamp);
            what.append(",ts=now+").append(timestamp - now);
        } else if (midStep) {
            // Mid-way through a long warm-up, in the middle of one step of the formula: the
            // effective weight is constant for minutes, so both read the same one all case long
            // (Dubbo reads System.currentTimeMillis, the adapter polylb's coarse clock).
            int warmup = (int) Math.min(Integer.MAX_VALUE, (long) weight * 200_000L * (1 + r.nextInt(3)));
            double step = (double) warmup / weight;
            if (step >= 200_000) {
                int k = 1 + r.nextInt(weight - 1);
                long uptime = (long) ((k + 0.5) * step);
                p.append("&timestamp=").append(now - uptime).append("&warmup=").append(warmup);
                what.append(",uptime=").append(uptime).append(",warmup=").append(warmup);
            }
        } else if (warm == 2) {
            // Warmed up long ago; or a timestamp parameter of 0 (no warm-up).
            long timestamp = r.nextBoolean() ? now - 10_000_000L - r.nextInt(1_000_000) : 0;
            p.append("&timestamp=").append(timestamp);
            what.append(",ts=").append(timestamp);
        }
        return p.toString();
    }

    /**
     * One random round-robin history: picks compared one by one with Dubbo's, with list changes
     * between them. Returns the number of picks compared.
     *
     * <p>Documented differences are kept out (bindings/java/README.md, README.md): a method whose
     * providers start declaring {@code <method>.weight} moves to a balancer of its own with fresh
     * counters, so method-level weights appear only for methods that have them from their first
     * call on (the first provider declares one); a list repeating a provider (a reselect's draws)
     * counts it once; a subset in another order than the set that is no router's BitList keeps
     * the set's order; and totals past 2^31 - 1 do not overflow as Dubbo's int total does (huge
     * weights stay below Integer.MAX_VALUE / 16, so no case here comes near).
     */
    private long roundRobinCase(long caseSeed, boolean reorder) {
        SplittableRandom r = new SplittableRandom(caseSeed);
        long now = System.currentTimeMillis();
        int methodCount = 1 + r.nextInt(3);
        List<String> methods = new ArrayList<>(List.of(METHODS).subList(0, methodCount));
        List<String> overridden = new ArrayList<>();
        for (String m : methods) {
            if (r.nextInt(6) == 0) {
                overridden.add(m);
            }
        }
        int n = 1 + r.nextInt(16);
        boolean equal = r.nextInt(8) == 0;
        int port = 20000;
        List<Invoker<Object>> current = new ArrayList<>();
        Map<Invoker<Object>, String> weightOf = new HashMap<>();
        String equalParams = "side=provider&weight=" + (1 + r.nextInt(200));
        for (int i = 0; i < n; i++) {
            StringBuilder what = new StringBuilder();
            String params = equal ? equalParams : randomWeightParams(r, overridden, now, what);
            if (i == 0 && !overridden.isEmpty()) {
                // The first provider declares weight=7 and a different weight for each
                // overridden method (Dubbo reads method-level parameters first).
                params = "side=provider&weight=7";
                what.setLength(0);
                what.append("w=7");
                for (String m : overridden) {
                    int mw = 8 + r.nextInt(300);
                    params += "&" + m + ".weight=" + mw;
                    what.append(',').append(m).append(".w=").append(mw);
                }
            } else if (equal) {
                what.append(equalParams.substring(equalParams.indexOf("weight")));
            }
            Invoker<Object> invoker = provider("dubbo", HOSTS[i % HOSTS.length], port++, params);
            current.add(invoker);
            weightOf.put(invoker, what.toString());
        }
        StringBuilder history = new StringBuilder();
        history.append("roundrobin case seed ").append(caseSeed).append("L, methods ").append(methods)
                .append(", providers ").append(describeList(current, weightOf));
        RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        List<Invoker<Object>> removed = new ArrayList<>();
        int total = 200 + r.nextInt(1801);
        long compared = 0;
        // Dubbo's router chain hands the balancer a fresh BitList over the directory's list per
        // call; other callers (and reselect) plain lists. Reordering cases use BitLists only.
        boolean bitLists = reorder || r.nextBoolean();
        history.append(bitLists ? ", BitLists" : ", plain lists");
        List<Invoker<Object>> subset = null;
        int routedFor = 0;
        for (int i = 0; i < total; i++) {
            if (i < methods.size()) {
                // Each method's first call, over the first list (see above).
                compared += comparePick(dubbo, polylb, current, methods.get(i), i, weightOf, history);
                continue;
            }
            if (routedFor > 0) {
                routedFor--;
                if (routedFor == 0) {
                    subset = null;
                    history.append("\n  #").append(i).append(" back to the full list");
                }
            } else if (r.nextInt(60) == 0) {
                int op = r.nextInt(reorder ? 7 : 6);
                switch (op) {
                    case 0 -> {
                        if (current.size() > 1) {
                            current = new ArrayList<>(current); // a new list per change, as Dubbo's directory
                            Invoker<Object> gone = current.remove(r.nextInt(current.size()));
                            boolean destroy = r.nextBoolean();
                            if (destroy) {
                                gone.destroy();
                            }
                            removed.add(gone);
                            history.append("\n  #").append(i).append(" removed ")
                                    .append(gone.getUrl().getAddress()).append(destroy ? " (destroyed)" : "");
                        }
                    }
                    case 1 -> {
                        if (!removed.isEmpty()) {
                            Invoker<Object> back = removed.remove(r.nextInt(removed.size()));
                            Invoker<Object> object = back.isAvailable() && r.nextBoolean() ? back
                                    : provider("dubbo", back.getUrl().getHost(), back.getUrl().getPort(),
                                            queryOf(back.getUrl()));
                            weightOf.put(object, weightOf.get(back));
                            int at = r.nextInt(current.size() + 1);
                            current = new ArrayList<>(current);
                            current.add(at, object);
                            history.append("\n  #").append(i).append(" re-added ")
                                    .append(back.getUrl().getAddress()).append(object == back ? "" : " (new object)")
                                    .append(" at ").append(at);
                        }
                    }
                    case 2 -> {
                        StringBuilder what = new StringBuilder();
                        String params = randomWeightParams(r, overridden, now, what);
                        Invoker<Object> added = provider("dubbo", HOSTS[r.nextInt(HOSTS.length)], port++, params);
                        weightOf.put(added, what.toString());
                        int at = r.nextInt(current.size() + 1);
                        current = new ArrayList<>(current);
                        current.add(at, added);
                        history.append("\n  #").append(i).append(" added ").append(added.getUrl().getAddress())
                                .append(" [").append(what).append("] at ").append(at);
                    }
                    case 3 -> {
                        // New parameters for a provider: a new Invoker object of the same identity.
                        int at = r.nextInt(current.size());
                        Invoker<Object> old = current.get(at);
                        StringBuilder what = new StringBuilder();
                        String params = at == 0 && !overridden.isEmpty() ? queryOf(old.getUrl())
                                : randomWeightParams(r, overridden, now, what);
                        if (at == 0 && !overridden.isEmpty()) {
                            what.append(weightOf.get(old));
                        }
                        Invoker<Object> renewed = provider("dubbo", old.getUrl().getHost(), old.getUrl().getPort(),
                                params);
                        old.destroy();
                        weightOf.put(renewed, what.toString());
                        current = new ArrayList<>(current);
                        current.set(at, renewed);
                        history.append("\n  #").append(i).append(" re-weighted ").append(old.getUrl().getAddress())
                                .append(" [").append(what).append(']');
                    }
                    case 4, 5 -> {
                        // A router's subset, in the list's order, for a few picks.
                        List<Invoker<Object>> routed = new ArrayList<>();
                        for (Invoker<Object> invoker : current) {
                            if (r.nextInt(3) != 0) {
                                routed.add(invoker);
                            }
                        }
                        if (!routed.isEmpty()) {
                            subset = routed;
                            routedFor = 1 + r.nextInt(40);
                            history.append("\n  #").append(i).append(" routed to ")
                                    .append(describeList(subset, weightOf)).append(" for ").append(routedFor);
                        }
                    }
                    default -> {
                        // The directory's list in another order from now on.
                        current = new ArrayList<>(current);
                        shuffle(current, r);
                        history.append("\n  #").append(i).append(" reordered to ")
                                .append(describeList(current, weightOf));
                    }
                }
            }
            List<Invoker<Object>> list = subset != null ? subset : current;
            if (bitLists) {
                BitList<Invoker<Object>> view = new BitList<>(current);
                if (subset != null) {
                    for (Invoker<Object> invoker : current) {
                        if (!subset.contains(invoker)) {
                            view.remove(invoker);
                        }
                    }
                }
                list = view;
            }
            String method = methods.get(r.nextInt(methods.size()));
            compared += comparePick(dubbo, polylb, list, method, i, weightOf, history);
        }
        return compared;
    }

    private static int comparePick(RoundRobinLoadBalance dubbo, PolylbLoadBalance polylb, List<Invoker<Object>> list,
            String method, int i, Map<Invoker<Object>, String> weightOf, CharSequence history) {
        RpcInvocation inv = TestInvokers.call(method, "x");
        Invoker<Object> expected = dubbo.select(list, list.get(0).getUrl(), inv);
        Invoker<Object> actual;
        try {
            actual = pick(polylb, list, inv);
        } catch (RuntimeException e) {
            throw new AssertionError("polylb failed at pick #" + i + " (" + method + "); " + history, e);
        }
        if (expected != actual) {
            fail("roundrobin pick #" + i + " of " + method + " differs from Dubbo's: expected "
                    + expected.getUrl().getAddress() + ", polylb picked "
                    + (actual == null ? null : actual.getUrl().getAddress())
                    + (list.contains(actual) ? "" : " (not in the list)") + " over "
                    + describeList(list, weightOf) + "; " + history);
        }
        return 1;
    }

    private static String describeList(List<Invoker<Object>> list, Map<Invoker<Object>, String> weightOf) {
        StringBuilder s = new StringBuilder("[");
        for (Invoker<Object> invoker : list) {
            s.append(s.length() == 1 ? "" : ", ").append(invoker.getUrl().getAddress()).append(' ')
                    .append(weightOf.get(invoker));
        }
        return s.append(']').toString();
    }

    // ------------------------------------------------------------------------------------------
    // warm-up (AbstractLoadBalance.getWeight)
    // ------------------------------------------------------------------------------------------

    @Test
    void warmUpWeightsEqualDubbosOnRandomTriples() {
        SplittableRandom r = new SplittableRandom(SEED + 6);
        DubboParityTest.DubboWeight dubbo = new DubboParityTest.DubboWeight();
        int compared = 0;
        for (int batch = 0; batch < 100; batch++) {
            List<Triple> triples = new ArrayList<>();
            for (int i = 0; i < 60; i++) {
                triples.add(Triple.random(r));
            }
            compared += compareWeights(dubbo, triples);
        }
        assertEquals(6000, compared);
    }

    /** One getWeight input: null fields are absent parameters. */
    record Triple(Integer weight, Long uptime, String warmup, Integer methodWeight, boolean registry) {
        static Triple random(SplittableRandom r) {
            Integer weight = switch (r.nextInt(10)) {
                case 0 -> null;
                case 1 -> r.nextInt(3) - 1; // -1, 0, 1
                case 2 -> -r.nextInt(Integer.MAX_VALUE);
                case 3 -> Integer.MAX_VALUE - r.nextInt(3);
                case 4 -> 1 + r.nextInt(Integer.MAX_VALUE);
                case 5 -> 1 + r.nextInt(1 << (1 + r.nextInt(30)));
                default -> 1 + r.nextInt(1000);
            };
            String warmup = switch (r.nextInt(10)) {
                case 0 -> null;
                case 1 -> Integer.toString(r.nextInt(3) - 1); // -1, 0, 1
                case 2 -> Integer.toString(-r.nextInt(Integer.MAX_VALUE));
                case 3 -> Integer.toString(Integer.MAX_VALUE - r.nextInt(3));
                case 4 -> Integer.toString(1 + r.nextInt(10));
                default -> Integer.toString(1 + r.nextInt(1 << (1 + r.nextInt(30))));
            };
            int w = warmup == null ? 600_000 : Integer.parseInt(warmup);
            Long uptime = switch (r.nextInt(12)) {
                case 0 -> null;
                case 1 -> (long) (r.nextInt(5) - 2); // -2..2
                case 2 -> -1L - (long) (r.nextDouble() * Math.pow(2, r.nextInt(44)));
                case 3 -> (long) w + r.nextInt(5) - 2; // around the warm-up's end
                case 4 -> System.currentTimeMillis() + r.nextInt(3) - 1; // timestamp 1, 0, -1
                case 5 -> System.currentTimeMillis() + 1 + (long) (r.nextDouble() * 1e12); // timestamp < 0
                case 6 -> (long) (r.nextDouble() * Math.max(1, w)); // inside the warm-up
                default -> (long) (r.nextDouble() * Math.pow(2, r.nextInt(44)));
            };
            Integer methodWeight = r.nextInt(10) == 0 ? r.nextInt(2001) - 1000 : null;
            return new Triple(weight, uptime, warmup, methodWeight, r.nextInt(25) == 0);
        }

        /** The provider URL's parameters at {@code now}. */
        String params(long now) {
            return TestInvokers.weightParams(weight, methodWeight, uptime, warmup, now);
        }
    }

    /**
     * Dubbo's getWeight for each triple, all within one millisecond (retried until its clock
     * reads fall in one), against polylb's effective weight at that millisecond.
     */
    private static int compareWeights(DubboParityTest.DubboWeight dubbo, List<Triple> triples) {
        RpcInvocation inv = TestInvokers.call("sayHello");
        for (int attempt = 0; attempt < 1000; attempt++) {
            long now = System.currentTimeMillis();
            List<Invoker<Object>> invokers = new ArrayList<>();
            for (int i = 0; i < triples.size(); i++) {
                Triple t = triples.get(i);
                URL url = URL.valueOf("dubbo://10.0.1." + (i + 1) + ":20880/" + SERVICE + "?" + t.params(now));
                if (t.registry()) {
                    URL registryUrl = URL.valueOf("registry://10.9.9.9:2181/org.apache.dubbo.registry.RegistryService"
                            + (t.weight() == null ? "" : "?weight=" + t.weight()));
                    invokers.add(new TestInvokers.FakeClusterInvoker(url, registryUrl));
                } else {
                    invokers.add(new TestInvokers.FakeInvoker(url));
                }
            }
            int[] expected = new int[triples.size()];
            for (int i = 0; i < invokers.size(); i++) {
                expected[i] = dubbo.weight(invokers.get(i), inv);
            }
            if (System.currentTimeMillis() != now) {
                continue; // Dubbo may have read another millisecond
            }
            List<io.polylb.Invoker> members = new ArrayList<>();
            for (int i = 0; i < invokers.size(); i++) {
                DubboUrls.ProviderParams p = DubboUrls.providerParams(invokers.get(i), "sayHello");
                members.add(new io.polylb.Invoker(i + 1, "10.0.1." + (i + 1) + ":20880", p.weight(),
                        p.startTimeMs(), p.warmupMs(), null));
            }
            try (Balancer lb = new Balancer("loadbalance=random")) {
                lb.update(members);
                int i = 0;
                for (JsonElement e : JsonParser.parseString(lb.statsJson(now * 1000)).getAsJsonObject()
                        .getAsJsonArray("invokers")) {
                    JsonObject member = e.getAsJsonObject();
                    int index = member.get("id").getAsInt() - 1;
                    Triple t = triples.get(index);
                    assertEquals(expected[index], member.get("effective_weight").getAsInt(),
                            "getWeight differs at now=" + now + " for " + t + ", URL " + invokers.get(index).getUrl());
                    i++;
                }
                assertEquals(triples.size(), i);
            }
            return triples.size();
        }
        throw new AssertionError("the clock kept moving");
    }

    // ------------------------------------------------------------------------------------------
    // the list's order (fixed cases of the rule the random ones found)
    // ------------------------------------------------------------------------------------------

    /**
     * Dubbo's round robin walks the call's list and takes the first largest counter: ties go to
     * the earliest in the list's order, whatever order the providers were first seen in. Equal
     * weights after one pick over [A, B, C]: counters A -2, B 1, C 1, then A -1, B 2, C 2, a tie
     * that the list [C, B, A] gives to C.
     */
    @Test
    void roundRobinTiesGoToTheEarliestInTheCallsListOrder() {
        List<Invoker<Object>> abc = TestInvokers.weighted(1, 1, 1);
        List<Invoker<Object>> cba = List.of(abc.get(2), abc.get(1), abc.get(0));
        RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        assertSame(abc.get(0), pick(polylb, abc, TestInvokers.call("m")));
        assertSame(abc.get(0), dubbo.select(abc, abc.get(0).getUrl(), TestInvokers.call("m")));
        assertSame(abc.get(2), dubbo.select(cba, cba.get(0).getUrl(), TestInvokers.call("m")), "Dubbo's rule");
        assertSame(abc.get(2), pick(polylb, cba, TestInvokers.call("m")));
        for (int i = 0; i < 30; i++) {
            List<Invoker<Object>> list = i % 10 < 5 ? cba : abc;
            RpcInvocation inv = TestInvokers.call("m");
            assertSame(dubbo.select(list, list.get(0).getUrl(), inv), pick(polylb, list, inv), "pick " + i);
        }
    }

    /**
     * A routed subset brings a new provider D before any full list: polylb's set was [C, D, A, B]
     * (the list's providers, then the others). The directory's list [A, B, C, D] that follows is
     * walked by Dubbo in its own order, so ties go to A first.
     */
    @Test
    void roundRobinFollowsTheDirectoryOrderAfterASubsetBroughtANewProvider() {
        List<Invoker<Object>> abc = TestInvokers.weighted(2, 2, 2);
        Invoker<Object> d = TestInvokers.invoker(4, "weight=2");
        List<Invoker<Object>> abcd = List.of(abc.get(0), abc.get(1), abc.get(2), d);
        List<Invoker<Object>> cd = List.of(abc.get(2), d);
        RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        for (int i = 0; i < 40; i++) {
            List<Invoker<Object>> list = i < 3 ? abc : i < 5 ? cd : abcd;
            RpcInvocation inv = TestInvokers.call("m");
            assertSame(dubbo.select(list, list.get(0).getUrl(), inv), pick(polylb, list, inv), "pick " + i);
        }
    }

    /**
     * Every call routed (a router always leaves D out): the directory's list is reordered by a
     * refresh, and the routed BitLists, subsets of it, follow its new order. So does the set.
     */
    @Test
    void roundRobinFollowsARoutedDirectorysNewOrder() {
        List<Invoker<Object>> abcd = TestInvokers.weighted(3, 3, 3, 3);
        List<Invoker<Object>> reordered = List.of(abcd.get(2), abcd.get(1), abcd.get(0), abcd.get(3));
        RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        pick(polylb, abcd, TestInvokers.call("warm-up")); // the set: [A, B, C, D]
        for (int i = 0; i < 60; i++) {
            BitList<Invoker<Object>> routed = new BitList<>(i < 20 ? abcd : reordered);
            routed.remove(abcd.get(3));
            RpcInvocation inv = TestInvokers.call("m");
            assertSame(dubbo.select(routed, routed.get(0).getUrl(), inv), pick(polylb, routed, inv), "pick " + i);
        }
    }

    /**
     * Two providers at one address (dubbo:// and tri:// on one port) place the same points on
     * Dubbo's ring; the later put wins, so the one later in the call's list owns every point.
     */
    @Test
    void consistentHashCollidingPointsGoToTheLatestInTheCallsListOrder() {
        Invoker<Object> dubboProtocol = provider("dubbo", "10.0.0.1", 20880, "side=provider");
        Invoker<Object> triProtocol = provider("tri", "10.0.0.1", 20880, "side=provider");
        Invoker<Object> other = provider("dubbo", "10.0.0.2", 20880, "side=provider");
        List<Invoker<Object>> first = List.of(dubboProtocol, triProtocol, other);
        List<Invoker<Object>> reversed = List.of(other, triProtocol, dubboProtocol);
        ConsistentHashLoadBalance dubbo = new ConsistentHashLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        int[] owners = new int[2];
        for (int k = 0; k < 400; k++) {
            List<Invoker<Object>> list = (k / 50) % 2 == 0 ? first : reversed;
            RpcInvocation inv = TestInvokers.call("get", "key-" + k);
            Invoker<Object> expected = dubbo.select(list, list.get(0).getUrl(), inv);
            assertTrue(expected != (list == first ? dubboProtocol : triProtocol), "Dubbo's rule, key-" + k);
            assertSame(expected, pick(polylb, list, inv), "key-" + k);
            if (expected != other) {
                owners[list == first ? 0 : 1]++;
            }
        }
        assertTrue(owners[0] > 0 && owners[1] > 0, java.util.Arrays.toString(owners));
    }

    private static long generation(PolylbLoadBalance lb) {
        return lb.serviceState(SERVICE).set.generation;
    }

    /**
     * Lists alternating between two orders on every call (two references of one service whose
     * directories order the providers differently): the set follows them only within the reorder
     * budget, not with a rebuild per call, and every pick is still one of the list's.
     */
    @Test
    void alternatingListOrdersRebuildTheSetOnlyWithinTheBudget() {
        List<Invoker<Object>> abcd = TestInvokers.weighted(3, 3, 3, 3);
        List<Invoker<Object>> dcba = List.of(abcd.get(3), abcd.get(2), abcd.get(1), abcd.get(0));
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        pick(polylb, abcd, TestInvokers.call("m"));
        long start = generation(polylb);
        long began = System.nanoTime();
        int calls = 4000;
        for (int i = 0; i < calls; i++) {
            List<Invoker<Object>> list = i % 2 == 0 ? dcba : abcd;
            assertTrue(list.contains(pick(polylb, list, TestInvokers.call("m"))), "pick " + i);
        }
        double seconds = (System.nanoTime() - began) / 1e9;
        long rebuilds = generation(polylb) - start;
        // The burst is spent (the set did follow the orders while it could), then at most the
        // refill rate: never one rebuild per call.
        assertTrue(rebuilds >= ServiceState.REORDER_BURST, "rebuilds " + rebuilds);
        assertTrue(rebuilds <= ServiceState.REORDER_BURST + ServiceState.REORDERS_PER_SECOND * seconds + 1,
                "rebuilds " + rebuilds + " in " + seconds + " s of " + calls + " calls");
    }

    /**
     * Without two providers at one address the ring does not depend on the list's order: lists
     * in other orders never rebuild it, and every key still goes where Dubbo's ring sends it.
     */
    @Test
    void consistentHashKeepsItsSetForReorderedListsWithoutSharedAddresses() {
        List<Invoker<Object>> list = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            list.add(provider("dubbo", "10.0.1." + i, 20880, "hash.nodes=40"));
        }
        ConsistentHashLoadBalance dubbo = new ConsistentHashLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        pick(polylb, list, TestInvokers.call("get", "first"));
        long start = generation(polylb);
        SplittableRandom r = new SplittableRandom(20261202);
        for (int k = 0; k < 300; k++) {
            List<Invoker<Object>> shuffled = new ArrayList<>(list);
            shuffle(shuffled, r);
            RpcInvocation inv = TestInvokers.call("get", "key-" + k);
            assertSame(dubbo.select(shuffled, shuffled.get(0).getUrl(), inv), pick(polylb, shuffled, inv), "key-" + k);
        }
        assertEquals(start, generation(polylb), "the set was rebuilt for a mere reorder");
    }

    @Test
    void oneCase() {
        String spec = System.getProperty("diff.case");
        if (spec == null) {
            return;
        }
        String[] kv = spec.split(":");
        long seed = Long.parseLong(kv[1]);
        switch (kv[0]) {
            case "ch" -> consistentHashCase(seed, false);
            case "chx" -> consistentHashCase(seed, true);
            case "rr" -> roundRobinCase(seed, false);
            case "rro" -> roundRobinCase(seed, true);
            default -> throw new IllegalArgumentException(spec);
        }
    }

    // ------------------------------------------------------------------------------------------
    // helpers
    // ------------------------------------------------------------------------------------------

    static TestInvokers.FakeInvoker provider(String protocol, String host, int port, String params) {
        String query = params == null || params.isEmpty() ? "" : "?" + params;
        String authority = port > 0 ? host + ":" + port : host;
        return new TestInvokers.FakeInvoker(URL.valueOf(protocol + "://" + authority + "/" + SERVICE + query));
    }

    private static String urls(List<Invoker<Object>> list) {
        StringBuilder s = new StringBuilder("[");
        for (Invoker<Object> invoker : list) {
            s.append(s.length() == 1 ? "" : ", ").append(escape(invoker.getUrl().toFullString()));
        }
        return s.append(']').toString();
    }

    private static String identities(List<Invoker<Object>> list) {
        StringBuilder s = new StringBuilder("[");
        for (Invoker<Object> invoker : list) {
            s.append(s.length() == 1 ? "" : ", ").append(escape(invoker.getUrl().toIdentityString()));
        }
        return s.append(']').toString();
    }

    private static <T> void shuffle(List<T> list, SplittableRandom r) {
        for (int i = list.size() - 1; i > 0; i--) {
            int j = r.nextInt(i + 1);
            T t = list.get(i);
            list.set(i, list.get(j));
            list.set(j, t);
        }
    }
}
