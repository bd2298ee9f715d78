package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Method;
import java.util.List;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.cluster.ClusterInvoker;
import org.apache.dubbo.rpc.cluster.loadbalance.RandomLoadBalance;
import org.junit.jupiter.api.Test;

class DubboUrlsTest {
    private static String key(int[] indexes, Object... args) {
        return DubboUrls.hashKey(TestInvokers.call("m", args), indexes);
    }

    @Test
    void hashKeysAreBuiltAsDubboBuildsThem() {
        assertEquals("user-39", key(new int[] {0, 1}, "user-3", 9));
        assertEquals("null", key(new int[] {0}, (Object) null));
        assertEquals("", key(new int[] {5, -1}, "a"));
        assertEquals("b", key(new int[] {1, 7}, "a", "b"));
        assertEquals("", key(new int[] {0}));
        String generic = DubboUrls.hashKey(TestInvokers.genericCall("m", "x", "y"), new int[] {1, 0});
        assertEquals("yx", generic);
    }

    @Test
    void hashArgumentsParseLikeDubbo() {
        URL url = URL.valueOf("dubbo://10.0.0.1:20880/S?hash.arguments=0,,2&m.hash.arguments=1");
        assertArrayEquals(new int[] {0, 2}, DubboUrls.hashArguments(url, "other"));
        assertArrayEquals(new int[] {1}, DubboUrls.hashArguments(url, "m"));
        assertArrayEquals(new int[] {0}, DubboUrls.hashArguments(URL.valueOf("dubbo://h:1/S"), "m"));
        assertThrows(NumberFormatException.class,
                () -> DubboUrls.hashArguments(URL.valueOf("dubbo://h:1/S?hash.arguments=a"), "m"));
    }

    @Test
    void providerParamsFollowDubbosGetWeightInputs() {
        DubboUrls.ProviderParams p = DubboUrls.providerParams(TestInvokers.invoker(1, "weight=-3&timestamp=99"));
        assertEquals(0, p.weight());
        assertEquals(0, p.startTimeMs());
        p = DubboUrls.providerParams(TestInvokers.invoker(1, "weight=7&timestamp=99&warmup=-5"));
        assertEquals(7, p.weight());
        assertEquals(99, p.startTimeMs());
        assertEquals(0, p.warmupMs(), "warmup <= 0 means none in Dubbo; 0 (not negative) for polylb");
        p = DubboUrls.providerParams(TestInvokers.invoker(1, null));
        assertEquals(100, p.weight());
        assertEquals(-1, p.warmupMs());
        // <method>.weight first, then weight; warm-up applies to the method's weight.
        org.apache.dubbo.rpc.Invoker<?> methodLevel = TestInvokers.invoker(1, "weight=7&m.weight=3&n.weight=-2&timestamp=99");
        assertEquals(new DubboUrls.ProviderParams(3, 99, -1, null), DubboUrls.providerParams(methodLevel, "m"));
        assertEquals(new DubboUrls.ProviderParams(0, 0, 0, null), DubboUrls.providerParams(methodLevel, "n"));
        assertEquals(new DubboUrls.ProviderParams(7, 99, -1, null), DubboUrls.providerParams(methodLevel, "other"));
        assertEquals(DubboUrls.providerParams(methodLevel), DubboUrls.providerParams(methodLevel, "other"));
        assertTrue(DubboUrls.declaresWeight(TestInvokers.invoker(1, "timestamp=1"), "m"));
        assertTrue(DubboUrls.declaresWeight(TestInvokers.invoker(1, "m.weight=3"), "m"));
        assertFalse(DubboUrls.declaresWeight(TestInvokers.invoker(1, "other.weight=3"), "m"));
    }

    @Test
    void adaptiveAttachmentsParseLikeDubbo() {
        DubboUrls.ProviderMetrics m = DubboUrls.parseAdaptiveAttachment("curTime:1700000000123,load:57.5");
        assertEquals(1700000000123L, m.providerTimeMs());
        assertEquals(57.5, m.load());
        m = DubboUrls.parseAdaptiveAttachment("curTime:12,load:-100.0");
        assertEquals(0.0, m.load(), "a negative load is not numeric for Dubbo: 0");
        m = DubboUrls.parseAdaptiveAttachment("load:3,junk,curTime:x");
        assertEquals(0, m.providerTimeMs());
        assertEquals(3.0, m.load());
        assertNull(DubboUrls.parseAdaptiveAttachment("curTime:5,load:."), "Double.parseDouble(\".\") fails");
        assertNull(DubboUrls.parseAdaptiveAttachment(""));
        assertNull(DubboUrls.parseAdaptiveAttachment(null));
    }

    /** A provider behind a cluster (multi-registry, zone-aware): Dubbo reads weights from its registry URL. */
    private static TestInvokers.FakeClusterInvoker clusterInvoker(String url, String registryUrl) {
        return new TestInvokers.FakeClusterInvoker(URL.valueOf(url), URL.valueOf(registryUrl));
    }

    /** Dubbo's own RandomLoadBalance.needWeightLoadBalance for a list whose first provider is {@code first}. */
    private static boolean dubboNeedsWeight(Invoker<Object> first, String method) throws Exception {
        Method need = RandomLoadBalance.class.getDeclaredMethod(
                "needWeightLoadBalance", List.class, org.apache.dubbo.rpc.Invocation.class);
        need.setAccessible(true);
        return (boolean) need.invoke(new RandomLoadBalance(), List.of(first), TestInvokers.call(method));
    }

    @Test
    void declaresWeightIsDubbosNeedWeightLoadBalance() throws Exception {
        String provider = "dubbo://10.0.0.1:20880/" + TestInvokers.SERVICE;
        String registry = "registry://10.0.0.9:2181/org.apache.dubbo.registry.RegistryService";
        String consumer = "consumer://10.0.0.9/" + TestInvokers.SERVICE;
        List<Invoker<Object>> cases = List.of(
                TestInvokers.invoker(1, null),
                TestInvokers.invoker(1, "m.weight=3"),
                TestInvokers.invoker(1, "timestamp=1"),
                clusterInvoker(provider, registry + "?weight=5"),
                clusterInvoker(provider + "?timestamp=1", registry),
                // A cluster under a directory that is not a registry: the method weight of the
                // cluster's registry URL, the timestamp of the invoker's own URL.
                clusterInvoker(provider, consumer + "?m.weight=5"),
                clusterInvoker(provider, consumer + "?weight=5"),
                clusterInvoker(provider + "?weight=5", consumer),
                clusterInvoker(provider + "?timestamp=1", consumer));
        for (Invoker<Object> first : cases) {
            ClusterInvoker<?> cluster = first instanceof ClusterInvoker ? (ClusterInvoker<?>) first : null;
            String shape = first.getUrl() + (cluster == null ? "" : " in " + cluster.getRegistryUrl());
            assertEquals(dubboNeedsWeight(first, "m"), DubboUrls.declaresWeight(first, "m"), shape);
        }
    }
}
