package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.PolylbException;
import io.polylb.Status;
import java.util.List;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.cluster.filter.ClusterFilter;
import org.apache.dubbo.rpc.Filter;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.Test;

/** Dubbo configuration selects the extensions by name, through Dubbo's own SPI loader. */
class SpiRegistrationTest {
    static final List<String> NAMES = List.of("polylb", "polylb-random", "polylb-roundrobin", "polylb-leastactive",
            "polylb-shortestresponse", "polylb-consistenthash", "polylb-adaptive", "polylb-p2c", "polylb-peakewma",
            "polylb-boundedhash", "polylb-maglev", "polylb-rendezvous", "polylb-orca");

    /** False when the core rejects the strategy name (p2c, peakewma, boundedhash, maglev, rendezvous, orca came later). */
    private static boolean coreKnows(LoadBalance lb, List<Invoker<Object>> list) {
        RpcInvocation probe = TestInvokers.call("sayHello", "probe");
        try {
            lb.select(list, list.get(0).getUrl(), probe);
            PolylbClusterFilter.releaseUnsent(probe);
            return true;
        } catch (org.apache.dubbo.rpc.RpcException e) {
            if (e.getCause() instanceof PolylbException
                    && ((PolylbException) e.getCause()).status() == Status.INVALID_CONFIG) {
                return false;
            }
            throw e;
        }
    }

    @Test
    void everyNameLoadsAndSelects() {
        FrameworkModel framework = new FrameworkModel();
        try {
            var app = framework.newApplication();
            List<Invoker<Object>> list = TestInvokers.invokers("weight=100&timestamp=1", "weight=200", "weight=300");
            for (String name : NAMES) {
                LoadBalance lb = app.getExtensionLoader(LoadBalance.class).getExtension(name);
                assertInstanceOf(PolylbLoadBalance.class, lb, name);
                if (!coreKnows(lb, list)) {
                    continue; // an older core without polylb's own strategies: the name still loads
                }
                for (int i = 0; i < 50; i++) {
                    RpcInvocation inv = TestInvokers.call("sayHello", "key-" + i);
                    PolylbClusterFilter.beginInvocation(inv);
                    Invoker<Object> chosen = lb.select(list, list.get(0).getUrl(), inv);
                    assertTrue(list.contains(chosen), name);
                    PolylbClusterFilter.releaseUnsent(inv);
                }
                String strategy = name.equals("polylb") ? "random" : name.substring("polylb-".length());
                String stats = ((PolylbLoadBalance) lb).statsJson(TestInvokers.SERVICE).get(0);
                assertTrue(stats.contains("\"strategy\":\"" + strategy + "\""), stats);
            }
            var module = app.getDefaultModule(); // filters are module-scoped extensions
            assertTrue(module.getExtensionLoader(Filter.class).hasExtension("polylb"));
            assertTrue(module.getExtensionLoader(ClusterFilter.class).hasExtension("polylb"));
            assertEquals(PolylbInvokerFilter.class,
                    module.getExtensionLoader(Filter.class).getExtension("polylb").getClass());
        } finally {
            framework.destroy();
        }
    }
}
