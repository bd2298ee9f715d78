package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.Balancer;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcException;
import org.junit.jupiter.api.Test;

/**
 * Subsetting through the adapter: {@code polylb.config=subset.size=2&subset.key=c1} on the
 * consumer's (merged) URL keeps every pick on 2 of 8 providers, the 2 its balancer marks {@code
 * in_subset}, and they are the addresses a plain {@link Balancer} with that key chooses over the
 * same addresses (the adapter passes the config and the addresses unchanged). The same holds for
 * {@code subset.size=2&subset.index=1} with {@code polylb-random}, which takes subsets dealt by index.
 */
class SubsetAdapterTest extends AdapterTest {
    private static final Pattern MEMBER =
            Pattern.compile("\\{\"id\":\\d+,\"address\":\"([^\"]*)\"[^\\[]*?\"in_subset\":true");

    /** Addresses marked in_subset in the stats documents. */
    private static Set<String> marked(List<String> statsJson) {
        Set<String> out = new TreeSet<>();
        for (String json : statsJson) {
            Matcher m = MEMBER.matcher(json);
            while (m.find()) {
                out.add(m.group(1));
            }
        }
        return out;
    }

    /** Providers 1..n at 10.0.0.i:20880, each URL carrying polylb.config = {@code extra}. */
    private static List<Invoker<Object>> providers(int n, String extra) {
        List<Invoker<Object>> list = new ArrayList<>();
        for (int i = 1; i <= n; i++) {
            // addParameter, as a <dubbo:parameter> or ReferenceConfig.setParameters puts it: the
            // value's '&' stays inside it.
            URL url = URL.valueOf("dubbo://10.0.0." + i + ":20880/" + TestInvokers.SERVICE + "?side=consumer")
                    .addParameter(PolylbLoadBalance.EXTRA_CONFIG_KEY, extra);
            list.add(new TestInvokers.FakeInvoker(url));
        }
        return list;
    }

    /**
     * Picks 2000 times with {@code polylb} over 8 providers carrying polylb.config = {@code extra}
     * and asserts they stay on 2 providers, the 2 the stats mark in_subset, which are those a plain
     * {@link Balancer} of {@code plainConfig} marks over the same addresses ({@code chosenBy}, "key"
     * or "index", words the failure). Returns the 2 addresses.
     */
    private Set<String> assertPicksStayWithinTheSubset(
            PolylbLoadBalance polylb, String extra, String plainConfig, String chosenBy) {
        List<Invoker<Object>> list = providers(8, extra);
        Set<String> picked = new TreeSet<>();
        for (int i = 0; i < 2000; i++) {
            picked.add(pick(polylb, list, call("sayHello")).getUrl().getAddress());
        }
        Set<String> marked = marked(polylb.statsJson(TestInvokers.SERVICE));
        assertEquals(2, picked.size(), "picks " + picked);
        assertEquals(marked, picked, "picks and the stats' in_subset rows");

        Set<String> plain = new TreeSet<>();
        try (Balancer lb = new Balancer(plainConfig)) {
            List<io.polylb.Invoker> set = new ArrayList<>();
            for (int i = 1; i <= 8; i++) {
                set.add(io.polylb.Invoker.of(100 + i, "10.0.0." + i + ":20880"));
            }
            lb.update(set);
            plain.addAll(marked(List.of(lb.statsJson())));
        }
        assertEquals(plain, picked, "a plain balancer with the same " + chosenBy + " over the same addresses");
        return picked;
    }

    @Test
    void picksStayWithinTheTwoProvidersOfTheSubset() {
        Set<String> picked = assertPicksStayWithinTheSubset(track(new PolylbLoadBalance.LeastActive()),
                "seed=9&subset.size=2&subset.key=c1", "loadbalance=leastactive&subset.size=2&subset.key=c1", "key");

        // Another consumer key: another pair (c2 is fixed, known to differ from c1 here).
        List<Invoker<Object>> other = providers(8, "subset.size=2&subset.key=c2");
        PolylbLoadBalance second = track(new PolylbLoadBalance.LeastActive());
        Set<String> otherPicked = new TreeSet<>();
        for (int i = 0; i < 500; i++) {
            otherPicked.add(pick(second, other, call("sayHello")).getUrl().getAddress());
        }
        assertEquals(2, otherPicked.size(), "picks " + otherPicked);
        assertTrue(!otherPicked.equals(picked), "keys c1 and c2 both give " + picked);
    }

    /**
     * {@code polylb-random} takes subsets by index (they hold every provider equally often over
     * the consumers): picks stay on the 2 providers the stats mark in_subset, and a plain {@link
     * Balancer} with the same index marks the same addresses.
     */
    @Test
    void randomPicksStayWithinTheSubsetDealtByIndex() {
        assertPicksStayWithinTheSubset(track(new PolylbLoadBalance.Random()),
                "seed=9&subset.size=2&subset.index=1", "loadbalance=random&subset.size=2&subset.index=1", "index");
    }

    /** A hashing strategy rejects subsetting: the call fails with the library's message. */
    @Test
    void aHashingStrategyRejectsSubsetting() {
        List<Invoker<Object>> list = providers(4, "subset.size=2&subset.key=c1");
        for (PolylbLoadBalance polylb : List.of(
                track(new PolylbLoadBalance.Maglev()), track(new PolylbLoadBalance.Rendezvous()))) {
            RpcException e = assertThrows(RpcException.class, () -> pick(polylb, list, call("sayHello", "k")));
            assertTrue(e.getMessage().contains("subset.size"), e.getMessage());
        }
    }

    /** Random refuses subset.key (its subsets spread binomially) and maglev subset.index. */
    @Test
    void randomRefusesAKeyAndMaglevAnIndex() {
        RpcException e = assertThrows(RpcException.class, () -> pick(track(new PolylbLoadBalance.Random()),
                providers(4, "subset.size=2&subset.key=c1"), call("sayHello")));
        assertTrue(e.getMessage().contains("subset.size"), e.getMessage());
        e = assertThrows(RpcException.class, () -> pick(track(new PolylbLoadBalance.Maglev()),
                providers(4, "subset.size=2&subset.index=1"), call("sayHello", "k")));
        assertTrue(e.getMessage().contains("subset.size"), e.getMessage());
    }
}
