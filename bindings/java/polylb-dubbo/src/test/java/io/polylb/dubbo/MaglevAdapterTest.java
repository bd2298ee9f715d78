package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.weighted;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.PolylbException;
import io.polylb.Status;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.RpcInvocation;
import org.junit.jupiter.api.Test;

/**
 * {@code polylb-maglev} (and {@code polylb} with {@code polylb.strategy=maglev}): the call's key
 * is Dubbo's consistent-hash key ({@code hash.arguments}, default the first argument), placed by
 * the core's weighted Maglev table.
 */
class MaglevAdapterTest extends HashingAdapterTest {
    @Test
    void theSameFirstArgumentGoesToTheSameProvider() {
        List<Invoker<Object>> list = providers(10, "weight=100");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        Map<Invoker<Object>, Integer> keysPerProvider = new HashMap<>();
        for (int k = 0; k < 500; k++) {
            Invoker<Object> first = pick(polylb, list, call("sayHello", "user-" + k));
            assertSame(first, pick(polylb, list, call("sayHello", "user-" + k)), "user-" + k);
            // Only the first argument is the key (hash.arguments defaults to 0).
            assertSame(first, pick(polylb, list, call("sayHello", "user-" + k, "other-" + k)), "user-" + k);
            keysPerProvider.merge(first, 1, Integer::sum);
        }
        assertEquals(10, keysPerProvider.size(), "500 keys over 10 providers: " + keysPerProvider);
        String stats = polylb.statsJson(TestInvokers.SERVICE).get(0);
        assertTrue(stats.contains("\"strategy\":\"maglev\""), stats);
        assertTrue(stats.contains("\"active\":0"), stats);
        // Not the ring: Dubbo's hash.nodes (here below the ring's minimum of 4) is not maglev's.
        List<Invoker<Object>> withHashNodes = providers(10, "weight=100&hash.nodes=2");
        PolylbLoadBalance other = track(new PolylbLoadBalance.Maglev());
        for (int k = 0; k < 100; k++) {
            assertEquals(pick(polylb, list, call("sayHello", "user-" + k)).getUrl().getAddress(),
                    pick(other, withHashNodes, call("sayHello", "user-" + k)).getUrl().getAddress());
        }
    }

    /** The generic name with the strategy as a parameter builds the same table: the same picks. */
    @Test
    void polylbWithStrategyMaglevPicksAsPolylbMaglev() {
        assertGenericNamePicksAsTheNamedAdapter(track(new PolylbLoadBalance.Maglev()), "maglev");
    }

    @Test
    void keysFollowHashArgumentsAndGenericCalls() {
        assertKeysFollowHashArgumentsAndGenericCalls(track(new PolylbLoadBalance.Maglev()), "hash.arguments=1", null);
    }

    /** A routed subset is passed as candidates: keys whose provider is routed away move, others stay. */
    @Test
    void aRoutedAwayProvidersKeysMoveAndOthersStay() {
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        assertOnlyTheRoutedAwayProvidersKeysMove(polylb, providers(6, "weight=100"), subset -> (key, now, moved) -> {
            if (moved) {
                assertSame(now, pick(polylb, subset, call("get", key)), key);
            }
        });
    }

    /** Maglev honours weights (Dubbo's ring does not): keys are shared out as the weights say. */
    @Test
    void keysFollowProviderWeights() {
        assertKeysFollowWeights100100200(track(new PolylbLoadBalance.Maglev()), weighted(100, 100, 200));
    }

    @Test
    void tableSizeComesFromPolylbConfigAndIsChecked() {
        // A valid size: accepted, and it is the table (7 providers fill a table of 7 slots).
        List<Invoker<Object>> seven = providers(7, "polylb.config=maglev.tableSize=7");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        Set<Invoker<Object>> seen = new HashSet<>();
        for (int k = 0; k < 200; k++) {
            seen.add(pick(polylb, seven, call("get", "user-" + k)));
        }
        assertEquals(7, seen.size());

        // Not a prime: the library's message, as an RpcException at the first call.
        List<Invoker<Object>> notPrime = providers(3, "polylb.config=maglev.tableSize=1000");
        RpcException bad = assertThrows(RpcException.class,
                () -> pick(track(new PolylbLoadBalance.Maglev()), notPrime, call("get", "k")));
        assertEquals(Status.INVALID_CONFIG, ((PolylbException) bad.getCause()).status());
        assertTrue(bad.getMessage().contains("maglev.tableSize") && bad.getMessage().contains("not a prime"),
                bad.getMessage());

        // More providers than slots: the provider list is rejected (LIMIT_EXCEEDED).
        List<Invoker<Object>> eight = providers(8, "polylb.config=maglev.tableSize=7");
        RpcException tooMany = assertThrows(RpcException.class,
                () -> pick(track(new PolylbLoadBalance.Maglev()), eight, call("get", "k")));
        assertEquals(Status.LIMIT_EXCEEDED, ((PolylbException) tooMany.getCause()).status());
        assertTrue(tooMany.getMessage().contains("maglev.tableSize"), tooMany.getMessage());

        // slowstart.* does not apply to maglev.
        List<Invoker<Object>> slowStart = providers(3, "polylb.config=slowstart.windowMs=1000");
        RpcException noSlowStart = assertThrows(RpcException.class,
                () -> pick(track(new PolylbLoadBalance.Maglev()), slowStart, call("get", "k")));
        assertEquals(Status.INVALID_CONFIG, ((PolylbException) noSlowStart.getCause()).status());
    }

    @Test
    void rpcInvocationKeysAreDubbosStringForms() {
        // String.valueOf of each hashed argument: 42 and "42" are the same key, as in Dubbo.
        List<Invoker<Object>> list = providers(10, "weight=100");
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.Maglev());
        for (int k = 0; k < 100; k++) {
            RpcInvocation number = call("get", Integer.valueOf(k));
            assertSame(pick(polylb, list, call("get", String.valueOf(k))), pick(polylb, list, number));
        }
    }
}
