package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.web.client.RestClient;
import org.springframework.web.reactive.function.client.WebClient;

/** Real Boot contexts, real HTTP clients, local servers: polylb places the requests and hears how they went. */
class BalancingTest extends LocalServers {
    @Test
    void weightsFromMetadataShareTheRequests() throws Exception {
        Backend a = backend("a", 200, 0);
        Backend b = backend("b", 200, 0);
        Backend c = backend("c", 200, 0);
        TestApp.DISCOVERY.put("weighted", List.of(a.instance("weighted", Map.of("weight", "100")),
                b.instance("weighted", Map.of("weight", "200")), c.instance("weighted", Map.of("weight", "300"))));
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients.weighted.polylb.config=loadbalance=p2c&seed=42");
        RestClient rest = context.getBean(RestClient.Builder.class).build();
        int n = 1200;
        for (int i = 0; i < n; i++) {
            rest.get().uri("http://weighted/").retrieve().body(String.class);
        }
        // One at a time nothing is in flight at a choice: p2c draws by weight alone. Each count
        // is binomial(n, w / 600); 4.5 sigma leaves a correct balancer a 1e-5 chance to fail.
        double[] share = {100 / 600.0, 200 / 600.0, 300 / 600.0};
        Backend[] backends = {a, b, c};
        for (int i = 0; i < 3; i++) {
            double mean = n * share[i];
            double sigma = Math.sqrt(n * share[i] * (1 - share[i]));
            int hits = backends[i].hits.get();
            System.out.printf("weight %d: %d hits, expected %.0f ± %.1f%n", 100 * (i + 1), hits, mean, 4.5 * sigma);
            assertTrue(Math.abs(hits - mean) <= 4.5 * sigma,
                    backends[i].name + ": " + hits + " hits, expected " + mean + " ± " + 4.5 * sigma);
        }
        PolylbClient client = TestApp.client(context, "weighted");
        assertEquals(0, Stats.active(client.statsJson()), client.statsJson());
        assertEquals(c.hits.get(), Stats.number(client.statsJson(), c.address(), "succeeded"));
    }

    /** The share of the slow server's hits under {@code config}, 24 callers at once through WebClient. */
    private double slowShare(String serviceId, String config) throws Exception {
        Backend fast1 = backend("fast1", 200, 2);
        Backend fast2 = backend("fast2", 200, 2);
        Backend slow = backend("slow", 200, 150);
        TestApp.DISCOVERY.put(serviceId,
                List.of(fast1.instance(serviceId), fast2.instance(serviceId), slow.instance(serviceId)));
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients." + serviceId + ".polylb.config=" + config);
        WebClient web = context.getBean(WebClient.Builder.class).build();
        ExecutorService callers = Executors.newFixedThreadPool(24);
        List<Future<?>> done = new ArrayList<>();
        for (int t = 0; t < 24; t++) {
            done.add(callers.submit(() -> {
                for (int i = 0; i < 15; i++) {
                    web.get().uri("http://" + serviceId + "/").retrieve().bodyToMono(String.class).block();
                }
                return null;
            }));
        }
        for (Future<?> f : done) {
            f.get(60, TimeUnit.SECONDS);
        }
        callers.shutdown();
        int total = fast1.hits.get() + fast2.hits.get() + slow.hits.get();
        assertEquals(24 * 15, total);
        assertEquals(0, Stats.active(TestApp.client(context, serviceId).statsJson()));
        return slow.hits.get() / (double) total;
    }

    @Test
    void inFlightCountsSteerAwayFromASlowServer() throws Exception {
        double random = slowShare("slowRandom", "loadbalance=random&seed=5");
        double p2c = slowShare("slowP2c", "loadbalance=p2c&seed=5");
        double leastactive = slowShare("slowLeastactive", "loadbalance=leastactive&seed=5");
        System.out.printf("slow server's share: random %.3f, p2c %.3f, leastactive %.3f%n", random, p2c, leastactive);
        // random ignores load: a third; the in-flight strategies see the slow server's calls pile up.
        assertTrue(random > 0.25, "random " + random);
        assertTrue(p2c < 0.12, "p2c " + p2c + " (random " + random + ")");
        assertTrue(leastactive < 0.12, "leastactive " + leastactive + " (random " + random + ")");
    }

    @Test
    void failuresReachPolylbAndEjectionMovesTrafficOff() throws Exception {
        Backend good1 = backend("good1", 200, 0);
        Backend good2 = backend("good2", 404, 0); // the service's own answer: no fault of the instance
        Backend bad = backend("bad", 503, 0);
        TestApp.DISCOVERY.put("failing",
                List.of(good1.instance("failing"), good2.instance("failing"), bad.instance("failing")));
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients.failing.polylb.config=loadbalance=p2c&seed=9&outlier.consecutiveFailures=3&outlier.maxEjectionPercent=50");
        WebClient web = context.getBean(WebClient.Builder.class).build();
        for (int i = 0; i < 60; i++) {
            web.get().uri("http://failing/").exchangeToMono(r -> r.releaseBody()).block();
        }
        PolylbClient client = TestApp.client(context, "failing");
        String stats = client.statsJson();
        assertEquals(bad.hits.get(), Stats.number(stats, bad.address(), "failures"), stats);
        assertTrue(bad.hits.get() >= 3, stats);
        assertTrue(Stats.flag(stats, bad.address(), "ejected"), stats);
        assertEquals(0, Stats.number(stats, good2.address(), "failures"), stats);
        assertEquals(good2.hits.get(), Stats.number(stats, good2.address(), "succeeded"), stats);
        int badBefore = bad.hits.get();
        for (int i = 0; i < 40; i++) {
            web.get().uri("http://failing/").exchangeToMono(r -> r.releaseBody()).block();
        }
        assertEquals(badBefore, bad.hits.get(), "an ejected instance still got requests: " + client.statsJson());
    }

    @Test
    void aRefusedConnectionIsAFailureAndA504ATimeout() throws Exception {
        Backend gateway = backend("gateway", 504, 0);
        Backend dead = backend("dead", 200, 0);
        int deadPort = dead.port();
        dead.close();
        TestApp.DISCOVERY.put("broken", List.of(gateway.instance("broken"),
                new org.springframework.cloud.client.DefaultServiceInstance("dead", "broken", "127.0.0.1", deadPort, false)));
        ConfigurableApplicationContext context = start();
        RestClient rest = context.getBean(RestClient.Builder.class).build();
        for (int i = 0; i < 20; i++) {
            try {
                rest.get().uri("http://broken/").retrieve().toBodilessEntity();
            } catch (RuntimeException expected) {
                // 504s and refused connections
            }
        }
        String stats = TestApp.client(context, "broken").statsJson();
        String deadAddress = "127.0.0.1:" + deadPort;
        long deadFailures = Stats.number(stats, deadAddress, "failures");
        assertTrue(deadFailures > 0, stats);
        assertEquals(0, Stats.number(stats, deadAddress, "timeouts"), stats);
        assertEquals(gateway.hits.get(), Stats.number(stats, gateway.address(), "timeouts"), stats);
        assertEquals(20, gateway.hits.get() + deadFailures, stats);
        assertEquals(0, Stats.active(stats), stats);
    }
}
