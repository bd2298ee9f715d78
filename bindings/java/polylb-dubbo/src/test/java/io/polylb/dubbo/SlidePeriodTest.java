package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.model.ApplicationModel;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.Test;

/**
 * Dubbo's ShortestResponseLoadBalance takes its window from the application configuration
 * {@code shortestResponseSlidePeriod} (default 30000 ms), not from a URL; so does the adapter.
 */
class SlidePeriodTest {
    private static String configOf(String slidePeriod, String extra) {
        String key = "shortestResponseSlidePeriod";
        String before = System.getProperty(key);
        if (slidePeriod != null) {
            System.setProperty(key, slidePeriod);
        }
        FrameworkModel framework = new FrameworkModel();
        try {
            ApplicationModel app = framework.newApplication();
            PolylbLoadBalance lb = (PolylbLoadBalance) app.getExtensionLoader(LoadBalance.class)
                    .getExtension("polylb-shortestresponse");
            List<Invoker<Object>> list = TestInvokers.invokers(extra, extra);
            RpcInvocation inv = TestInvokers.call("sayHello");
            PolylbClusterFilter.beginInvocation(inv);
            lb.select(list, list.get(0).getUrl(), inv);
            PolylbClusterFilter.releaseUnsent(inv);
            return lb.serviceState(TestInvokers.SERVICE).bindingsByMethod.get("sayHello").config;
        } finally {
            framework.destroy();
            if (before == null) {
                System.clearProperty(key);
            } else {
                System.setProperty(key, before);
            }
        }
    }

    @Test
    void theApplicationsSlidePeriodIsUsed() {
        String config = configOf("5000", null);
        assertTrue(config.contains("shortestresponse.slidePeriod=5000"), config);
    }

    @Test
    void zeroAndNegativePeriodsReachPolylbAsDubboReadsThem() {
        // Dubbo resets its window when now - lastUpdate > slidePeriod, for any int: 0 at the first
        // pick 1 ms on, a negative period at every pick; the library takes the same rule.
        for (String period : new String[] {"0", "-1", "-2147483648"}) {
            String config = configOf(period, null);
            assertTrue(config.contains("shortestresponse.slidePeriod=" + period), config);
        }
    }

    @Test
    void defaultIsDubbosAndPolylbConfigStillWins() {
        String config = configOf(null, null);
        assertTrue(config.contains("shortestresponse.slidePeriod=30000") || !config.contains("slidePeriod"), config);
        // An explicit polylb.config value is not duplicated (the library rejects duplicate keys).
        config = configOf("5000", "polylb.config=shortestresponse.slidePeriod=2000");
        assertEquals(1, config.split("slidePeriod", -1).length - 1, config);
        assertTrue(config.contains("slidePeriod=2000"), config);
    }
}
