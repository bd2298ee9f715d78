package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.loadbalancer.LoadBalancerClient;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.web.client.RestClient;
import org.springframework.web.reactive.function.client.WebClient;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;

/** Every request counted in flight is ended exactly once, whatever becomes of it. */
class AccountingTest extends LocalServers {
    @Test
    void inFlightReturnsToZeroAfterConcurrentRequestsFailuresAndCancels() throws Exception {
        Backend ok = backend("ok", 200, 5);
        Backend failing = backend("failing", 500, 5);
        Backend slow = backend("slow", 200, 400);
        TestApp.DISCOVERY.put("mixed", List.of(ok.instance("mixed"), failing.instance("mixed"), slow.instance("mixed")));
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients.mixed.polylb.config=loadbalance=random&seed=11",
                "spring.cloud.loadbalancer.clients.mixed.polylb.lease-timeout=2s");
        WebClient web = context.getBean(WebClient.Builder.class).build();
        AtomicInteger answered = new AtomicInteger();
        AtomicInteger cancelled = new AtomicInteger();
        // 300 requests, 32 at a time; each gives up after 100 ms, which cancels the exchange
        // under it: Spring's filter then calls no lifecycle method at all.
        Flux.range(0, 300)
                .flatMap(i -> web.get().uri("http://mixed/").exchangeToMono(r -> r.releaseBody().thenReturn(1))
                        .timeout(Duration.ofMillis(100))
                        .doOnNext(x -> answered.incrementAndGet())
                        .onErrorResume(e -> {
                            cancelled.incrementAndGet();
                            return Mono.empty();
                        }), 32)
                .blockLast(Duration.ofSeconds(60));
        PolylbClient client = TestApp.client(context, "mixed");
        assertEquals(300, answered.get() + cancelled.get());
        assertTrue(cancelled.get() > 0 && answered.get() > 0, answered + " answered, " + cancelled + " cancelled");
        // Answers and failures are ended at once; cancelled exchanges wait for the lease timeout
        // (fewer than were cancelled: a give-up before the choice, or after the answer's headers,
        // leaves nothing open).
        int open = client.requestsInFlight();
        assertTrue(open > 0 && open <= cancelled.get(), open + " open, " + cancelled + " cancelled");
        assertEquals(open, Stats.active(client.statsJson()), client.statsJson());
        assertTrue(Stats.number(client.statsJson(), failing.address(), "failures") > 0, client.statsJson());
        Thread.sleep(2100);
        web.get().uri("http://mixed/").exchangeToMono(r -> r.releaseBody()).block(); // its choice sweeps
        assertEquals(0, client.requestsInFlight(), client.statsJson());
        assertEquals(0, Stats.active(client.statsJson()), client.statsJson());
        // Cancels are no verdict on the slow instance: no failure, no timeout.
        assertEquals(0, Stats.number(client.statsJson(), slow.address(), "failures"), client.statsJson());
    }

    @Test
    void aChoiceThatIsNeverSentLeavesNothingInFlight() throws Exception {
        Backend a = backend("a", 200, 0);
        Backend b = backend("b", 200, 0);
        TestApp.DISCOVERY.put("chosen", List.of(a.instance("chosen"), b.instance("chosen")));
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients.chosen.polylb.config=loadbalance=leastactive&seed=3");
        LoadBalancerClient lb = context.getBean(LoadBalancerClient.class);
        AtomicInteger toA = new AtomicInteger();
        for (int i = 0; i < 200; i++) {
            ServiceInstance chosen = lb.choose("chosen");
            if (chosen.getInstanceId().equals("a")) {
                toA.incrementAndGet();
            }
        }
        PolylbClient client = TestApp.client(context, "chosen");
        assertEquals(0, Stats.active(client.statsJson()), client.statsJson());
        assertEquals(0, client.requestsInFlight());
        // Nothing stayed in flight, so leastactive kept choosing among equals: both got picked.
        assertTrue(toA.get() > 20 && toA.get() < 180, toA + " of 200 to a");
        // A choice sent later through execute() is counted from its start and ended by it.
        ServiceInstance chosen = lb.choose("chosen");
        String body = lb.execute("chosen", chosen, instance -> {
            assertEquals(1, Stats.active(client.statsJson()), client.statsJson());
            return "sent to " + instance.getInstanceId();
        });
        assertEquals("sent to " + chosen.getInstanceId(), body);
        assertEquals(0, Stats.active(client.statsJson()), client.statsJson());
        String address = (chosen.getInstanceId().equals("a") ? a : b).address();
        assertEquals(1, Stats.number(client.statsJson(), address, "succeeded"), client.statsJson());
    }

    @Test
    void churnKeepsIdsOfInstancesThatStayAndDropsThoseThatLeft() throws Exception {
        Backend a = backend("a", 200, 0);
        Backend b = backend("b", 200, 0);
        Backend c = backend("c", 200, 0);
        Backend d = backend("d", 200, 0);
        TestApp.DISCOVERY.put("churn", List.of(a.instance("churn"), b.instance("churn"), c.instance("churn")));
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients.churn.polylb.config=loadbalance=roundrobin");
        RestClient rest = context.getBean(RestClient.Builder.class).build();
        for (int i = 0; i < 30; i++) {
            rest.get().uri("http://churn/").retrieve().body(String.class);
        }
        PolylbClient client = TestApp.client(context, "churn");
        Map<String, Long> before = client.instances().ids();
        long bSucceeded = Stats.number(client.statsJson(), b.address(), "succeeded");
        assertEquals(10, bSucceeded, client.statsJson());

        TestApp.DISCOVERY.put("churn", List.of(d.instance("churn"), c.instance("churn"),
                b.instance("churn", Map.of("weight", "100"))));
        rest.get().uri("http://churn/").retrieve().body(String.class);
        Map<String, Long> after = client.instances().ids();
        assertEquals(before.get("b"), after.get("b"));
        assertEquals(before.get("c"), after.get("c"));
        assertFalse(after.containsKey("a"), after.toString());
        assertFalse(after.containsValue(before.get("a")), "a departed id was reused: " + after);
        String stats = client.statsJson();
        assertFalse(stats.contains(a.address()), stats);
        // b's counters survived the update: its 10 answers are still there (plus at most this one).
        assertTrue(Stats.number(stats, b.address(), "succeeded") >= bSucceeded, stats);

        TestApp.DISCOVERY.put("churn", List.of(a.instance("churn"), b.instance("churn"), c.instance("churn")));
        rest.get().uri("http://churn/").retrieve().body(String.class);
        Long aAgain = client.instances().ids().get("a");
        assertNotEquals(before.get("a"), aAgain, "a returning instance starts afresh");
        assertEquals(0, Stats.number(client.statsJson(), a.address(), "succeeded")
                + Stats.number(client.statsJson(), a.address(), "failures") - (a.hits.get() - 10));
    }

    @Test
    void aBadConfigFailsTheStartupNamingTheProperty() {
        RuntimeException e = assertThrows(RuntimeException.class,
                () -> start("spring.cloud.loadbalancer.clients.orders.polylb.config=loadbalance=p2cc"));
        String message = rootMessage(e);
        assertTrue(message.contains("'orders'") && message.contains("spring.cloud.loadbalancer.clients.orders.polylb.config")
                && message.contains("did you mean 'p2c'"), message);

        e = assertThrows(RuntimeException.class,
                () -> start("spring.cloud.loadbalancer.polylb.config=loadbalance=p2c&outlier.consecutivFailures=5"));
        assertTrue(rootMessage(e).contains("outlier.consecutivFailures"), rootMessage(e));

        e = assertThrows(RuntimeException.class,
                () -> start("spring.cloud.loadbalancer.polylb.failure-statuses=500-5xx"));
        assertTrue(rootMessage(e).contains("failure-statuses") && rootMessage(e).contains("500-5xx"), rootMessage(e));

        e = assertThrows(RuntimeException.class,
                () -> start("spring.cloud.loadbalancer.clients.x.polylb.lease-timeout=-1s"));
        assertTrue(rootMessage(e).contains("lease-timeout"), rootMessage(e));

        // and a good one starts
        start("spring.cloud.loadbalancer.clients.orders.polylb.config=loadbalance=peakewma&peakewma.choices=0");
    }

    private static String rootMessage(Throwable e) {
        StringBuilder all = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            all.append(t.getMessage()).append(" | ");
        }
        return all.toString();
    }
}
