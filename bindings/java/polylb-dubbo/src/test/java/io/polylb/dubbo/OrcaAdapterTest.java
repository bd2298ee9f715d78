package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.PolylbException;
import io.polylb.Status;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.Test;

/**
 * {@code polylb-orca} (and {@code polylb} with {@code polylb.strategy=orca}): weighted round robin
 * by the load reports a consumer feeds through {@link PolylbLoadBalance#reportLoad}.
 */
class OrcaAdapterTest extends AdapterTest {
    /** Providers 1..4 at 10.0.0.&lt;id&gt;:20880, weight 100, no blackout. */
    private static List<Invoker<Object>> providers(String params) {
        return TestInvokers.invokers(params, params, params, params);
    }

    private static final String NO_BLACKOUT = "weight=100&polylb.config=orca.blackoutMs=0";

    /** A field's raw JSON value in the stats row of the provider at {@code 10.0.0.n:20880}. */
    private static String field(String json, int n, String name) {
        Matcher row = Pattern.compile("\\{\"id\":\\d+,\"address\":\"10\\.0\\.0\\." + n + ":20880\".*?\\}")
                .matcher(json);
        assertTrue(row.find(), "no row for 10.0.0." + n + " in " + json);
        Matcher m = Pattern.compile("\"" + name + "\":([^,}]+)").matcher(row.group());
        assertTrue(m.find(), "no " + name + " in " + row.group());
        return m.group(1);
    }

    private static String stats(PolylbLoadBalance lb) {
        List<String> all = lb.statsJson(TestInvokers.SERVICE);
        assertEquals(1, all.size(), all.toString());
        return all.get(0);
    }

    /** The cross-language reports: capacities 200, 400 and 100 for 1..3, none for 4. */
    private static void report(PolylbLoadBalance lb, List<Invoker<Object>> list) {
        assertTrue(lb.reportLoad(list.get(0), 100, 0, 0.5));
        assertTrue(lb.reportLoad(list.get(1), 100, 0, 0.25));
        assertTrue(lb.reportLoad(list.get(2), 100, 50, 0.5));
    }

    /**
     * Picks until the schedule deals by the reports: the weights are taken up at most
     * {@code orca.updateMs} (1 s) after a report, at a pick.
     */
    private static void awaitReportedSchedule(PolylbLoadBalance lb, List<Invoker<Object>> list) {
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (!field(stats(lb), 1, "orca_reported").equals("true")) {
            assertTrue(System.nanoTime() < deadline, "the reports never counted: " + stats(lb));
            pick(lb, list, call("sayHello", "x"));
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
        }
    }

    /** Picks per provider (its last address byte) over {@code n} calls. */
    private static Map<Integer, Integer> deal(LoadBalance lb, List<Invoker<Object>> list, int n) {
        Map<Integer, Integer> counts = new HashMap<>();
        for (int i = 0; i < n; i++) {
            Invoker<Object> chosen = pick(lb, list, call("sayHello", "x"));
            counts.merge(list.indexOf(chosen) + 1, 1, Integer::sum);
        }
        return counts;
    }

    /** Loaded by name through Dubbo's SPI, it shares the calls out by the reported capacities. */
    @Test
    void polylbOrcaLoadsThroughDubbosSpiAndDealsByTheReports() {
        FrameworkModel framework = new FrameworkModel();
        try {
            LoadBalance loaded = framework.newApplication().getExtensionLoader(LoadBalance.class)
                    .getExtension("polylb-orca");
            assertInstanceOf(PolylbLoadBalance.Orca.class, loaded);
            PolylbLoadBalance lb = (PolylbLoadBalance) loaded;
            List<Invoker<Object>> list = providers(NO_BLACKOUT);
            // Nothing balanced yet: no balancer takes the report.
            assertFalse(lb.reportLoad(list.get(0), 100, 0, 0.5));
            // Without reports the configured weights deal the calls in turn: 1:1:1:1 exactly.
            assertEquals(Map.of(1, 100, 2, 100, 3, 100, 4, 100), deal(lb, list, 400));
            String before = stats(lb);
            assertTrue(before.contains("\"strategy\":\"orca\""), before);
            assertEquals("false", field(before, 1, "orca_reported"), before);

            report(lb, list);
            awaitReportedSchedule(lb, list);
            String json = stats(lb);
            assertEquals(200.0, Double.parseDouble(field(json, 1, "orca_weight")), 1e-9, json);
            assertEquals(400.0, Double.parseDouble(field(json, 2, "orca_weight")), 1e-9, json);
            assertEquals(100.0, Double.parseDouble(field(json, 3, "orca_weight")), 1e-9, json);
            assertEquals("null", field(json, 4, "orca_weight"), json);
            // 4 has no report: it takes the mean, 233.3, of 933.3 in all.
            double total = 200 + 400 + 100 + 700.0 / 3;
            double[] shares = {200 / total, 400 / total, 100 / total, 700.0 / 3 / total};
            for (int n = 1; n <= 4; n++) {
                assertEquals(shares[n - 1], Double.parseDouble(field(json, n, "orca_share")), 1e-4, json);
            }
            // Dealt in turn (a stride schedule, no draw): within 2 of each share.
            Map<Integer, Integer> counts = deal(lb, list, 1400);
            for (int n = 1; n <= 4; n++) {
                int got = counts.getOrDefault(n, 0);
                assertTrue(Math.abs(got - 1400 * shares[n - 1]) <= 2,
                        "10.0.0." + n + ": " + got + " of 1400, expected " + 1400 * shares[n - 1] + " (" + counts + ")");
            }
        } finally {
            framework.destroy();
        }
    }

    /** The generic name with {@code polylb.strategy=orca} is the same strategy. */
    @Test
    void polylbWithStrategyOrcaTakesReportsToo() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance());
        List<Invoker<Object>> list = providers(NO_BLACKOUT + "&polylb.strategy=orca");
        pick(lb, list, call("sayHello", "x"));
        assertTrue(stats(lb).contains("\"strategy\":\"orca\""), stats(lb));
        report(lb, list);
        awaitReportedSchedule(lb, list);
        assertEquals(400.0, Double.parseDouble(field(stats(lb), 2, "orca_weight")), 1e-9, stats(lb));
    }

    /** A report for a provider the adapter does not know, or a service it never balanced: not taken. */
    @Test
    void reportsForUnknownProvidersOrServicesAreNotTaken() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.Orca());
        List<Invoker<Object>> list = providers(NO_BLACKOUT);
        pick(lb, list, call("sayHello", "x"));
        String before = stats(lb);
        assertFalse(lb.reportLoad(TestInvokers.invoker(9, NO_BLACKOUT), 100, 0, 0.5));
        assertFalse(lb.reportLoad(new TestInvokers.FakeInvoker(
                org.apache.dubbo.common.URL.valueOf("dubbo://10.0.0.1:20880/com.example.OtherService")), 100, 0, 0.5));
        assertEquals(before, stats(lb));
        // Other strategies' balancers take reports and ignore them.
        PolylbLoadBalance random = track(new PolylbLoadBalance.Random());
        List<Invoker<Object>> plain = providers("weight=100");
        pick(random, plain, call("sayHello", "x"));
        String randomBefore = stats(random);
        assertTrue(random.reportLoad(plain.get(0), 100, 0, 0.5));
        assertFalse(randomBefore.contains("orca_"), randomBefore);
        assertEquals(randomBefore, stats(random));
    }

    /** A report out of range throws as the library's calls do, and changes nothing. */
    @Test
    void badReportsThrowAndChangeNothing() {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.Orca());
        List<Invoker<Object>> list = providers(NO_BLACKOUT);
        double[][] bad = {{Double.NaN, 0, 1}, {100, -1, 1}, {100, 0, Double.POSITIVE_INFINITY}, {100, 101, 1}};
        String[] named = {"qps = NaN", "eps = -1.0", "utilization = Infinity", "eps = 101.0 is above qps = 100.0"};
        // Refused whether or not a balancer would take it.
        for (int i = 0; i < bad.length; i++) {
            double[] r = bad[i];
            PolylbException e = assertThrows(PolylbException.class,
                    () -> lb.reportLoad(list.get(1), r[0], r[1], r[2]), named[i]);
            assertEquals(Status.INVALID_ARGUMENT, e.status(), named[i]);
            assertTrue(e.getMessage().contains(named[i]), e.getMessage());
        }
        pick(lb, list, call("sayHello", "x"));
        String before = stats(lb);
        for (int i = 0; i < bad.length; i++) {
            double[] r = bad[i];
            assertEquals(Status.INVALID_ARGUMENT, assertThrows(PolylbException.class,
                    () -> lb.reportLoad(list.get(1), r[0], r[1], r[2]), named[i]).status());
        }
        assertEquals(before, stats(lb));
        assertThrows(NullPointerException.class, () -> lb.reportLoad(null, 1, 0, 1));
    }

    /** orca.* keys are checked as every key is: the call fails naming the key. */
    @Test
    void badOrcaKeysFailTheCall() {
        for (String[] c : new String[][] {
            {"orca", "polylb.config=orca.blackoutMs=-1", "orca.blackoutMs"},
            {"orca", "polylb.config=orca.errorPenalty=101", "orca.errorPenalty"},
            {"orca", "polylb.config=slowstart.windowMs=1000", "slowstart.windowMs"},
            {"random", "polylb.config=orca.updateMs=5", "orca.updateMs"},
            {"roundrobin", "polylb.config=orca.blackoutMs=0", "orca.blackoutMs"},
        }) {
            // polylb-orca itself; the other strategies through the generic name.
            PolylbLoadBalance lb = track(c[0].equals("orca") ? new PolylbLoadBalance.Orca() : new PolylbLoadBalance());
            List<Invoker<Object>> list = providers(c[1] + "&polylb.strategy=" + c[0]);
            RpcException e = assertThrows(RpcException.class, () -> pick(lb, list, call("get", "k")), c[1]);
            assertEquals(Status.INVALID_CONFIG, ((PolylbException) e.getCause()).status(), c[1]);
            assertTrue(e.getMessage().contains(c[2]), e.getMessage());
        }
    }
}
