package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.SERVICE;
import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.genericCall;
import static io.polylb.dubbo.TestInvokers.invokers;
import static io.polylb.dubbo.TestInvokers.weighted;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.polylb.Balancer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.AbstractLoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.ConsistentHashLoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.RoundRobinLoadBalance;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** polylb through the Dubbo adapter against the real dubbo-cluster classes, in the same JVM. */
class DubboParityTest extends AdapterTest {
    private static List<Invoker<Object>> tenProviders(String params) {
        String[] p = new String[10];
        java.util.Arrays.fill(p, params);
        return invokers(p);
    }

    @Test
    void consistentHashEqualsDubboOnThousandsOfKeys() {
        List<Invoker<Object>> list = tenProviders("timestamp=1&weight=100");
        ConsistentHashLoadBalance dubbo = new ConsistentHashLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        SplittableRandom random = new SplittableRandom(7);
        for (int k = 0; k < 5000; k++) {
            String key = k % 2 == 0 ? "user-" + k : Long.toHexString(random.nextLong()) + "-é-" + k;
            RpcInvocation inv = call("sayHello", key);
            assertSame(dubbo.select(list, list.get(0).getUrl(), inv), pick(polylb, list, inv), key);
        }
    }

    @Test
    void consistentHashKeysWithoutUtf8FormHashAsDubboHashesThem() {
        // A lone surrogate (e.g. an emoji cut in half by substring) has no UTF-8 form; Dubbo hashes
        // String.getBytes(UTF_8), which writes '?' for it, and routes the call like any other.
        List<Invoker<Object>> all = tenProviders("weight=100");
        List<Invoker<Object>> subset = all.subList(2, 9);
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        for (String key : List.of("\uD83D", "u-\uDE00", "user-42-\uD83D", "a key longer than 16 chars \uD83D",
                "\uDE00\uD83D", "pair-\uD83D\uDE00-ok")) {
            for (List<Invoker<Object>> list : List.of(all, subset)) {
                RpcInvocation inv = call("get", key);
                Invoker<Object> expected = new ConsistentHashLoadBalance().select(list, list.get(0).getUrl(), inv);
                assertSame(expected, pick(polylb, list, inv), key + " over " + list.size() + " providers");
            }
        }
    }

    @Test
    void consistentHashKeysFollowHashArgumentsAndGenericCalls() {
        String params = "hash.arguments=0,2&hash.nodes=40";
        List<Invoker<Object>> list = tenProviders(params);
        ConsistentHashLoadBalance dubbo = new ConsistentHashLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        for (int k = 0; k < 2000; k++) {
            Object[] args = {"user-" + k, k, k % 3 == 0 ? null : Integer.valueOf(k * 7)};
            RpcInvocation direct = call("findUser", args);
            RpcInvocation generic = genericCall("findUser", args);
            Invoker<Object> expected = dubbo.select(list, list.get(0).getUrl(), direct);
            assertSame(expected, pick(polylb, list, direct));
            assertSame(dubbo.select(list, list.get(0).getUrl(), generic), pick(polylb, list, generic));
            assertSame(expected, pick(polylb, list, generic), "generic $invoke hashes the inner arguments");
        }
        // A method-level hash.arguments wins over the service level, as in Dubbo.
        List<Invoker<Object>> methodLevel = tenProviders("hash.arguments=0&findUser.hash.arguments=1");
        for (int k = 0; k < 500; k++) {
            RpcInvocation inv = call("findUser", "same-first-arg", "second-" + k);
            assertSame(new ConsistentHashLoadBalance().select(methodLevel, methodLevel.get(0).getUrl(), inv),
                    pick(polylb, methodLevel, inv));
        }
    }

    @Test
    void consistentHashOnRoutedSubsetsEqualsDubboRingOfTheSubset() {
        List<Invoker<Object>> all = tenProviders("weight=100");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        SplittableRandom random = new SplittableRandom(3);
        for (int round = 0; round < 20; round++) {
            List<Invoker<Object>> subset = new ArrayList<>();
            for (Invoker<Object> invoker : all) {
                if (random.nextInt(3) != 0) {
                    subset.add(invoker);
                }
            }
            if (subset.size() < 2) {
                continue;
            }
            ConsistentHashLoadBalance dubbo = new ConsistentHashLoadBalance();
            pick(polylb, all, call("get", "warm-up")); // the full set is registered first
            for (int k = 0; k < 200; k++) {
                RpcInvocation inv = call("get", "key-" + round + "-" + k);
                assertSame(dubbo.select(subset, subset.get(0).getUrl(), inv), pick(polylb, subset, inv));
            }
        }
    }

    @Test
    void routerChainBitListsGiveTheSameAnswersAsDubbo() {
        List<Invoker<Object>> origin = tenProviders("weight=100");
        org.apache.dubbo.rpc.cluster.router.state.BitList<Invoker<Object>> directory =
                new org.apache.dubbo.rpc.cluster.router.state.BitList<>(origin);
        ConsistentHashLoadBalance dubbo = new ConsistentHashLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        SplittableRandom random = new SplittableRandom(11);
        for (int k = 0; k < 3000; k++) {
            // As Dubbo's router chain: a fresh clone per call, sometimes with providers routed away.
            org.apache.dubbo.rpc.cluster.router.state.BitList<Invoker<Object>> routed = directory.clone();
            if (k % 3 == 0) {
                routed.remove(origin.get(random.nextInt(origin.size())));
                routed.remove(origin.get(random.nextInt(origin.size())));
            }
            RpcInvocation inv = call("get", "key-" + k);
            assertSame(dubbo.select(routed, routed.get(0).getUrl(), inv), pick(polylb, routed, inv), "key-" + k);
        }
        RoundRobinLoadBalance dubboRr = new RoundRobinLoadBalance();
        PolylbLoadBalance polylbRr = track(new PolylbLoadBalance.RoundRobin());
        List<Invoker<Object>> weightedOrigin = weighted(3, 5, 7, 11, 13);
        org.apache.dubbo.rpc.cluster.router.state.BitList<Invoker<Object>> weightedDirectory =
                new org.apache.dubbo.rpc.cluster.router.state.BitList<>(weightedOrigin);
        for (int i = 0; i < 500; i++) {
            org.apache.dubbo.rpc.cluster.router.state.BitList<Invoker<Object>> routed = weightedDirectory.clone();
            RpcInvocation inv = call("sayHello");
            assertSame(dubboRr.select(routed, routed.get(0).getUrl(), inv), pick(polylbRr, routed, inv));
        }
    }

    @Test
    void roundRobinSequencesEqualDubbos() {
        int[][] weightSets = {{5, 1, 1}, {1, 2, 3, 4}, {100, 100, 100}, {1000, 1, 1}, {0, 3, 0, 2},
            {107, 114, 121, 128, 135, 142, 149, 156, 163, 170}};
        for (int[] weights : weightSets) {
            List<Invoker<Object>> list = weighted(weights);
            RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
            PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
            for (int i = 0; i < 2000; i++) {
                RpcInvocation inv = call("sayHello", "x");
                Invoker<Object> expected = dubbo.select(list, list.get(0).getUrl(), inv);
                assertSame(expected, pick(polylb, list, inv),
                        "weights " + java.util.Arrays.toString(weights) + ", pick #" + i);
            }
        }
    }

    @Test
    void roundRobinSurvivesRemovalAndReAddLikeDubbo() {
        List<Invoker<Object>> all = weighted(3, 5, 7, 11);
        List<Invoker<Object>> without = new ArrayList<>(all.subList(0, 3));
        RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        List<List<Invoker<Object>>> phases = List.of(all, without, all, without, all);
        for (List<Invoker<Object>> list : phases) {
            for (int i = 0; i < 37; i++) {
                RpcInvocation inv = call("sayHello");
                assertSame(dubbo.select(list, list.get(0).getUrl(), inv), pick(polylb, list, inv));
            }
        }
    }

    /** Exposes Dubbo's protected AbstractLoadBalance.getWeight. */
    static final class DubboWeight extends AbstractLoadBalance {
        int weight(Invoker<?> invoker, Invocation invocation) {
            return getWeight(invoker, invocation);
        }

        @Override
        protected <T> Invoker<T> doSelect(List<Invoker<T>> invokers, URL url, Invocation invocation) {
            throw new UnsupportedOperationException();
        }
    }

    @Test
    void warmUpWeightsEqualDubbos() {
        DubboWeight dubbo = new DubboWeight();
        Integer[] weights = {null, 0, 1, 7, 14, 29, 100, 250, 1000, -5};
        Long[] uptimes = {null, -5000L, 0L, 1L, 13L, 6000L, 12000L, 60000L, 119999L, 300000L, 305999L, 306000L,
            537931L, 599999L, 600000L, 600001L, 3_000_000_000L};
        String[] warmups = {null, "0", "-1", "1000", "120000", "600000", "900000"};
        RpcInvocation inv = call("sayHello");
        int compared = 0;
        for (Integer w : weights) {
            for (Long uptime : uptimes) {
                for (String warmup : warmups) {
                    compared += compareWeight(dubbo, inv, w, uptime, warmup);
                }
            }
        }
        assertEquals(weights.length * uptimes.length * warmups.length, compared);
    }

    /** One (weight, uptime, warmup) case; retried until Dubbo's clock read falls in one millisecond. */
    private static int compareWeight(DubboWeight dubbo, Invocation inv, Integer w, Long uptime, String warmup) {
        for (int attempt = 0; attempt < 100; attempt++) {
            long now = System.currentTimeMillis();
            Invoker<Object> invoker = TestInvokers.invoker(1, TestInvokers.weightParams(w, null, uptime, warmup, now));
            int expected = dubbo.weight(invoker, inv);
            if (System.currentTimeMillis() != now) {
                continue; // Dubbo may have read another millisecond
            }
            DubboUrls.ProviderParams p = DubboUrls.providerParams(invoker);
            try (Balancer lb = new Balancer("loadbalance=random")) {
                lb.update(List.of(new io.polylb.Invoker(1, "10.0.0.1:20880", p.weight(), p.startTimeMs(),
                        p.warmupMs(), null)));
                JsonObject member = JsonParser.parseString(lb.statsJson(now * 1000)).getAsJsonObject()
                        .getAsJsonArray("invokers").get(0).getAsJsonObject();
                assertEquals(expected, member.get("effective_weight").getAsInt(),
                        "weight=" + w + " uptime=" + uptime + " warmup=" + warmup);
            }
            return 1;
        }
        throw new AssertionError("the clock kept moving");
    }

    @Test
    void randomIgnoresWeightsWhenTheFirstProviderDeclaresNoneLikeDubbo() {
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Random());
        // First provider: no weight, no timestamp -> Dubbo picks uniformly, ignoring weight=1 / 1000.
        List<Invoker<Object>> quirky = invokers(null, "weight=1", "weight=1000");
        int[] counts = count(polylb, quirky, 6000);
        for (int c : counts) {
            assertTrue(c > 1500 && c < 2500, java.util.Arrays.toString(counts));
        }
        // Once the first provider declares a weight, weights apply.
        List<Invoker<Object>> weightedList = invokers("weight=100", "weight=1", "weight=1000");
        int[] weightedCounts = count(polylb, weightedList, 6000);
        assertTrue(weightedCounts[2] > 4800 && weightedCounts[1] < 60, java.util.Arrays.toString(weightedCounts));
    }

    private static int[] count(LoadBalance lb, List<Invoker<Object>> list, int picks) {
        int[] counts = new int[list.size()];
        for (int i = 0; i < picks; i++) {
            counts[list.indexOf(pick(lb, list, call("m")))]++;
        }
        return counts;
    }

    @Test
    void unsentPicksAreReleasedAndStatsStayExact() {
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.LeastActive());
        List<Invoker<Object>> list = weighted(100, 100, 100);
        for (int i = 0; i < 100; i++) {
            RpcInvocation inv = call("m");
            PolylbClusterFilter.beginInvocation(inv);
            polylb.select(list, list.get(0).getUrl(), inv);
            polylb.select(list, list.get(0).getUrl(), inv); // a reselect: the first pick is never sent
            PolylbClusterFilter.releaseUnsent(inv);
        }
        for (String json : polylb.statsJson(TestInvokers.SERVICE)) {
            for (JsonElement member : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                assertEquals(0, member.getAsJsonObject().get("active").getAsInt(), json);
            }
        }
    }

    @Test
    void providerChangesUpdateTheSetAndKeepIds() {
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        List<Invoker<Object>> first = weighted(1, 1, 1);
        pick(polylb, first, call("m"));
        List<Invoker<Object>> grown = new ArrayList<>(first);
        grown.add(TestInvokers.invoker(9, "weight=1"));
        for (int i = 0; i < 8; i++) {
            assertTrue(grown.contains(pick(polylb, grown, call("m"))));
        }
        // The first provider is destroyed and leaves the list: it leaves polylb's set too.
        first.get(0).destroy();
        List<Invoker<Object>> shrunk = new ArrayList<>(grown.subList(1, 4));
        for (int i = 0; i < 8; i++) {
            assertTrue(shrunk.contains(pick(polylb, shrunk, call("m"))));
        }
        JsonArray members = JsonParser.parseString(polylb.statsJson(TestInvokers.SERVICE).get(0)).getAsJsonObject()
                .getAsJsonArray("invokers");
        assertEquals(3, members.size(), members.toString());
    }

    @Test
    void aListChangedInPlaceIsAnsweredForWhatItHoldsNow() {
        // Dubbo's directories hand out a new list per change, but a caller may reuse one list.
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.RoundRobin());
        List<Invoker<Object>> list = new ArrayList<>(weighted(1, 1, 1, 1));
        pick(polylb, list, call("m"));
        Invoker<Object> removed = list.remove(2);
        for (int i = 0; i < 12; i++) {
            Invoker<Object> chosen = pick(polylb, list, call("m"));
            assertTrue(chosen != removed && list.contains(chosen), "pick " + i + " is not in the list");
        }
        list.add(TestInvokers.invoker(9, "weight=1"));
        int newcomer = 0;
        for (int i = 0; i < 12; i++) {
            Invoker<Object> chosen = pick(polylb, list, call("m"));
            assertTrue(list.contains(chosen), "pick " + i + " is not in the list");
            newcomer += chosen == list.get(3) ? 1 : 0;
        }
        assertTrue(newcomer > 0, "the provider added in place was never picked");
    }

    @Test
    void aMethodLevelStrategyAddedAsAParameterIsRead() {
        // What a <dubbo:method> with parameters gives: flat "sayHello.polylb.strategy", added to the
        // URL by addParameters, which Dubbo 3's getMethodParameter does not see for keys it does
        // not know.
        List<Invoker<Object>> list = new ArrayList<>();
        for (int i = 1; i <= 3; i++) {
            URL url = URL.valueOf("dubbo://10.0.0." + i + ":20880/" + SERVICE + "?weight=" + i)
                    .addParameters(Map.of("sayHello.polylb.strategy", "roundrobin", "sayHello.polylb.config", "seed=7"));
            list.add(new TestInvokers.FakeInvoker(url));
        }
        PolylbLoadBalance polylb = track(new PolylbLoadBalance());
        RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
        for (int i = 0; i < 12; i++) {
            RpcInvocation inv = call("sayHello");
            assertSame(dubbo.select(list, list.get(0).getUrl(), inv), pick(polylb, list, inv), "pick " + i);
        }
        String stats = String.join("\n", polylb.statsJson(list.get(0).getUrl().getServiceKey()));
        assertTrue(stats.contains("\"strategy\":\"roundrobin\"") && !stats.contains("\"strategy\":\"random\""), stats);
        // Another method of the service keeps the default.
        pick(polylb, list, call("other"));
        stats = String.join("\n", polylb.statsJson(list.get(0).getUrl().getServiceKey()));
        assertTrue(stats.contains("\"strategy\":\"random\""), stats);
    }

    @Test
    void aMisspeltAdapterKeyIsAnError() {
        for (String params : List.of("polylb.strateg=roundrobin", "sayHello.polylb.stratgy=roundrobin",
                "polylb.confg=seed=1")) {
            List<Invoker<Object>> list = invokers(params, params);
            PolylbLoadBalance polylb = track(new PolylbLoadBalance());
            org.apache.dubbo.rpc.RpcException e = assertThrows(org.apache.dubbo.rpc.RpcException.class,
                    () -> polylb.select(list, list.get(0).getUrl(), call("sayHello")), params);
            assertTrue(e.getMessage().contains(params.substring(0, params.indexOf('=')))
                    && e.getMessage().contains("polylb.strategy"), e.getMessage());
        }
        // Not near misses: a method named polylb (Dubbo writes <method>.<attribute>), a key of a
        // later adapter, another extension's key.
        List<Invoker<Object>> good = invokers("polylb.strategy=leastactive&polylb.config=seed=1&sayHello.polylb.strategy=p2c"
                + "&polylb.timeout=100&polylb.sweepPeriodMs=5&polylb.someLaterKey=1&metrics.polylb.enabled=true", "weight=1");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance());
        assertTrue(good.contains(polylb.select(good, good.get(0).getUrl(), call("sayHello"))));
    }

    @Test
    void badConfigurationBecomesRpcExceptions() {
        List<Invoker<Object>> list = invokers("polylb.strategy=nosuch", "weight=1");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance());
        org.apache.dubbo.rpc.RpcException e = assertThrows(org.apache.dubbo.rpc.RpcException.class,
                () -> polylb.select(list, list.get(0).getUrl(), call("m")));
        assertTrue(e.getMessage().contains("nosuch"), e.getMessage());
        List<Invoker<Object>> tinyRing = invokers("hash.nodes=2", "weight=1");
        assertThrows(org.apache.dubbo.rpc.RpcException.class,
                () -> track(new PolylbLoadBalance.ConsistentHash()).select(tinyRing, tinyRing.get(0).getUrl(),
                        call("m", "k")));
        // The generic name reads its strategy from the URL.
        List<Invoker<Object>> rr = invokers("polylb.strategy=roundrobin&weight=1", "weight=1");
        RoundRobinLoadBalance dubbo = new RoundRobinLoadBalance();
        for (int i = 0; i < 10; i++) {
            RpcInvocation inv = call("m");
            assertSame(dubbo.select(rr, rr.get(0).getUrl(), inv), pick(polylb, rr, inv));
        }
    }
}
