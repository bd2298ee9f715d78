package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.cluster.router.state.BitList;
import org.junit.jupiter.api.Test;

/**
 * Two references to one service: each holds its own invoker and URL objects of the same
 * providers, and their calls take turns. A method's resolved configuration is kept across them
 * (it was rebuilt, under the service's lock, on every call); a reference whose providers say
 * something else still gets its own. The calls of the reference whose objects are aliases of the
 * other's do not walk the set once their list is known.
 */
class TwoReferencesTest extends AdapterTest {
    private static final String PARAMS = "side=provider&weight=100";
    private static final AtomicLong AVAILABILITY_READS = new AtomicLong();

    /** One reference's objects of {@code n} providers weighing 100, 200, 300, 100, 200, ... */
    private static List<Invoker<Object>> reference(int n) {
        List<Invoker<Object>> list = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            list.add(new TestInvokers.CountingInvoker(URL.valueOf("dubbo://10.0." + (i / 250) + "." + (i % 250) + ":20880/"
                    + TestInvokers.SERVICE + "?side=provider&weight=" + (100 * (1 + i % 3))), AVAILABILITY_READS));
        }
        return list;
    }

    /**
     * The calls of the reference whose objects are aliases, its list known to stand for the set,
     * read no provider's availability but the pick's (the match read every member's: 1,000 a
     * call) and return the call's own objects, in proportion to the weights.
     */
    @Test
    void aReferencesKnownListOfAliasesIsNotWalkedPerCall() {
        for (boolean routed : new boolean[] {false, true}) {
            PolylbLoadBalance lb = track(new PolylbLoadBalance.Random());
            List<Invoker<Object>> aliased = reference(1000);
            List<Invoker<Object>> members = reference(1000);
            pick(lb, aliased, call("sayHello"));
            // The newest objects seen become the members; the first reference's are aliases.
            pick(lb, members, call("sayHello"));
            assertSame(members.get(0), lb.serviceState(TestInvokers.SERVICE).set.invokers[0]);
            for (int i = 0; i < 3; i++) {
                pick(lb, routed ? new BitList<>(aliased) : aliased, call("sayHello"));
            }
            Map<Invoker<?>, Integer> position = new IdentityHashMap<>();
            for (int i = 0; i < aliased.size(); i++) {
                position.put(aliased.get(i), i);
            }
            AVAILABILITY_READS.set(0);
            int calls = 30_000;
            long[] byWeight = new long[3];
            for (int i = 0; i < calls; i++) {
                Invoker<Object> chosen = pick(lb, routed ? new BitList<>(aliased) : aliased, call("sayHello"));
                Integer p = position.get(chosen);
                assertTrue(p != null, "not one of the call's own objects: " + chosen);
                byWeight[p % 3]++;
            }
            assertSame(members.get(0), lb.serviceState(TestInvokers.SERVICE).set.invokers[0]);
            long reads = AVAILABILITY_READS.get();
            assertTrue(reads <= 2L * calls, reads + " availability reads for " + calls + " selects (routed: " + routed + ")");
            // Weights 100 / 200 / 300, a third of the providers each: shares 1/6, 2/6, 3/6; five
            // standard deviations of a binomial count over 30,000 draws.
            for (int w = 0; w < 3; w++) {
                double expected = calls * (w + 1) / 6.0;
                double sd = Math.sqrt(expected * (1 - (w + 1) / 6.0));
                assertTrue(Math.abs(byWeight[w] - expected) < 5 * sd,
                        "weight " + (100 * (w + 1)) + ": " + byWeight[w] + " picks, expected " + expected);
            }
        }
    }

    /**
     * A member destroyed while the other reference's list of aliases stays known: that
     * reference's live object of the provider is registered in its place at its next pick, as
     * the match's promotion does.
     */
    @Test
    void aDestroyedMemberIsReplacedByTheKnownListsLiveObject() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.Random());
        List<Invoker<Object>> aliased = reference(3);
        List<Invoker<Object>> members = reference(3);
        pick(lb, aliased, call("sayHello"));
        pick(lb, members, call("sayHello"));
        for (int i = 0; i < 3; i++) {
            pick(lb, aliased, call("sayHello"));
        }
        assertSame(members.get(1), lb.serviceState(TestInvokers.SERVICE).set.invokers[1]);
        members.get(1).destroy();
        for (int i = 0; i < 200; i++) {
            assertTrue(pick(lb, aliased, call("sayHello")).isAvailable());
        }
        assertSame(aliased.get(1), lb.serviceState(TestInvokers.SERVICE).set.invokers[1]);
    }

    @Test
    void callsThroughTwoReferencesKeepTheMethodsConfiguration() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.Random());
        List<Invoker<Object>> first = TestInvokers.invokers(PARAMS, PARAMS, PARAMS);
        List<Invoker<Object>> second = TestInvokers.invokers(PARAMS, PARAMS, PARAMS);
        assertNotSame(first.get(0).getUrl(), second.get(0).getUrl());
        pick(lb, first, call("sayHello"));
        pick(lb, second, call("sayHello"));
        ServiceState state = lb.serviceState(TestInvokers.SERVICE);
        ServiceState.MethodBinding binding = state.bindingsByMethod.get("sayHello");
        for (int i = 0; i < 100; i++) {
            pick(lb, i % 2 == 0 ? first : second, call("sayHello"));
        }
        assertSame(binding, state.bindingsByMethod.get("sayHello"), "the method's configuration was rebuilt");
    }

    @Test
    void aReferenceWhoseProvidersSaySomethingElseGetsItsOwnConfiguration() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.Random());
        List<Invoker<Object>> first = TestInvokers.invokers(PARAMS, PARAMS);
        List<Invoker<Object>> other = TestInvokers.invokers(
                PARAMS + "&hash.arguments=1", PARAMS + "&hash.arguments=1");
        pick(lb, first, call("sayHello"));
        ServiceState state = lb.serviceState(TestInvokers.SERVICE);
        ServiceState.MethodBinding binding = state.bindingsByMethod.get("sayHello");
        pick(lb, other, call("sayHello"));
        ServiceState.MethodBinding rebuilt = state.bindingsByMethod.get("sayHello");
        assertNotSame(binding, rebuilt);
        assertSame(other.get(0).getUrl(), rebuilt.configUrl);
        assertEquals(binding.config, rebuilt.config);
    }
}
