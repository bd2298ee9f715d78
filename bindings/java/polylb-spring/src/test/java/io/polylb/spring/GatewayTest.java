package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.cloud.client.DefaultServiceInstance;
import org.springframework.cloud.loadbalancer.annotation.LoadBalancerClients;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.web.reactive.function.client.WebClient;

/**
 * Spring Cloud Gateway's ReactiveLoadBalancerClientFilter: a route to lb://edge chooses through
 * polylb and completes through its lifecycle with the proxied answer's status.
 */
class GatewayTest extends LocalServers {
    /** For the other tests' applications, which run no web server: the Gateway on the test classpath needs one. */
    static final String OFF = "spring.cloud.gateway.server.webflux.enabled=false";

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @LoadBalancerClients(defaultConfiguration = {PolylbLoadBalancerConfiguration.class, TestInstances.class})
    static class GatewayApp {}

    @Test
    void aLoadBalancedRouteIsBalancedAndReported() throws Exception {
        Backend a = backend("a", 200, 0);
        Backend b = backend("b", 200, 0);
        Backend missing = backend("missing", 404, 0);
        Backend unavailable = backend("unavailable", 503, 0);
        Backend gateway = backend("gateway", 504, 0);
        Backend dead = backend("dead", 200, 0);
        int deadPort = dead.port();
        dead.close();
        TestApp.DISCOVERY.put("edge", List.of(a.instance("edge", Map.of("weight", "100")),
                b.instance("edge", Map.of("weight", "300"))));
        ConfigurableApplicationContext context = closeLater(new SpringApplicationBuilder(GatewayApp.class)
                .web(WebApplicationType.REACTIVE)
                .properties("spring.main.banner-mode=off", "spring.cloud.loadbalancer.cache.enabled=false",
                        "server.port=0",
                        "spring.cloud.gateway.server.webflux.routes[0].id=edge",
                        "spring.cloud.gateway.server.webflux.routes[0].uri=lb://edge",
                        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/**",
                        "spring.cloud.loadbalancer.clients.edge.polylb.config=loadbalance=p2c&seed=42")
                .run());
        String port = context.getEnvironment().getProperty("local.server.port");
        WebClient direct = WebClient.create("http://127.0.0.1:" + port); // to the gateway, not balanced itself
        int n = 600;
        for (int i = 0; i < n; i++) {
            direct.get().uri("/").retrieve().bodyToMono(String.class).block();
        }
        // one at a time: p2c draws by weight alone; binomial(n, 1/4 and 3/4), 4.5 sigma
        HashingTest.assertBinomial(n, new Backend[] {a, b}, new double[] {0.25, 0.75});
        PolylbClient client = TestApp.client(context, "edge");
        assertEquals(n, Stats.number(client.statsJson(), a.address(), "succeeded")
                + Stats.number(client.statsJson(), b.address(), "succeeded"), client.statsJson());

        // outcomes: 404 a success, 503 a failure, 504 a timeout, a refused connection a failure
        TestApp.DISCOVERY.put("edge", List.of(missing.instance("edge"), unavailable.instance("edge"),
                gateway.instance("edge"), new DefaultServiceInstance("dead", "edge", "127.0.0.1", deadPort, false)));
        int refused = 0;
        for (int i = 0; i < 200; i++) {
            int status = direct.get().uri("/").exchangeToMono(r -> r.releaseBody().thenReturn(r.statusCode().value()))
                    .block();
            if (status != 404 && status != 503 && status != 504) {
                refused++; // the gateway answers a refused connection with its own error status
            }
        }
        String stats = client.statsJson();
        System.out.printf("gateway: 404 %d, 503 %d, 504 %d, refused %d%n", missing.hits.get(), unavailable.hits.get(),
                gateway.hits.get(), refused);
        assertEquals(200, missing.hits.get() + unavailable.hits.get() + gateway.hits.get() + refused);
        assertTrue(refused > 0 && missing.hits.get() > 0 && unavailable.hits.get() > 0 && gateway.hits.get() > 0, stats);
        assertEquals(missing.hits.get(), Stats.number(stats, missing.address(), "succeeded"), stats);
        assertEquals(unavailable.hits.get(), Stats.number(stats, unavailable.address(), "failures"), stats);
        assertEquals(0, Stats.number(stats, unavailable.address(), "timeouts"), stats);
        assertEquals(gateway.hits.get(), Stats.number(stats, gateway.address(), "timeouts"), stats);
        String deadAddress = "127.0.0.1:" + deadPort;
        assertEquals(refused, Stats.number(stats, deadAddress, "failures"), stats);
        assertEquals(0, Stats.number(stats, deadAddress, "timeouts"), stats);
        assertEquals(0, client.requestsInFlight(), stats);
        assertEquals(0, Stats.active(stats), stats);
    }

    @Test
    void aClientThatDisconnectsMidProxyIsNotLeftInFlight() throws Exception {
        Backend slow = backend("slow", 200, 1000);
        TestApp.DISCOVERY.put("edge", List.of(slow.instance("edge")));
        ConfigurableApplicationContext context = closeLater(new SpringApplicationBuilder(GatewayApp.class)
                .web(WebApplicationType.REACTIVE)
                .properties("spring.main.banner-mode=off", "spring.cloud.loadbalancer.cache.enabled=false",
                        "server.port=0",
                        "spring.cloud.gateway.server.webflux.routes[0].id=edge",
                        "spring.cloud.gateway.server.webflux.routes[0].uri=lb://edge",
                        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/**",
                        "spring.cloud.loadbalancer.clients.edge.polylb.config=loadbalance=leastactive")
                .run());
        WebClient direct = WebClient.create("http://127.0.0.1:" + context.getEnvironment().getProperty("local.server.port"));
        for (int i = 0; i < 5; i++) {
            // the caller gives up after 200 ms: its connection to the gateway is closed mid-proxy
            direct.get().uri("/").retrieve().bodyToMono(String.class).timeout(Duration.ofMillis(200))
                    .onErrorReturn("gave up").block();
        }
        PolylbClient client = TestApp.client(context, "edge");
        long deadline = System.nanoTime() + Duration.ofSeconds(5).toNanos();
        while (client.requestsInFlight() > 0 && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        String stats = client.statsJson();
        // the lease timeout is 60 s: only the cancels can have ended them
        assertEquals(0, client.requestsInFlight(), stats);
        assertEquals(0, Stats.active(stats), stats);
        // a client's disconnect is no verdict on the instance
        assertEquals(0, Stats.number(stats, slow.address(), "failures"), stats);
    }
}
