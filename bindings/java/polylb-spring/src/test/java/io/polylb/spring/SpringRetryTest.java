package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.cloud.client.loadbalancer.LoadBalanced;
import org.springframework.cloud.loadbalancer.annotation.LoadBalancerClients;
import org.springframework.cloud.loadbalancer.support.LoadBalancerClientFactory;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.web.reactive.function.client.WebClient;

/**
 * Spring's own instance suppliers (discovery, caching) with its retries on: a retry's list leaves
 * out the instance just tried (RetryAwareServiceInstanceListSupplier), which must not make that
 * instance leave polylb's set.
 */
class SpringRetryTest extends LocalServers {
    @SpringBootConfiguration
    @EnableAutoConfiguration
    @LoadBalancerClients(defaultConfiguration = PolylbLoadBalancerConfiguration.class)
    static class DiscoveryApp {
        @Bean
        @LoadBalanced
        WebClient.Builder webClientBuilder() {
            return WebClient.builder();
        }
    }

    @Test
    void aRetryElsewhereKeepsTheFailedInstanceAndItsEjection() throws Exception {
        Backend good = backend("good", 200, 0);
        Backend bad = backend("bad", 503, 0);
        ConfigurableApplicationContext context = new SpringApplicationBuilder(DiscoveryApp.class)
                .web(WebApplicationType.NONE)
                .properties("spring.main.banner-mode=off", GatewayTest.OFF,
                        "spring.cloud.discovery.client.simple.instances.flaky[0].uri=http://" + good.address(),
                        "spring.cloud.discovery.client.simple.instances.flaky[0].instance-id=good",
                        "spring.cloud.discovery.client.simple.instances.flaky[1].uri=http://" + bad.address(),
                        "spring.cloud.discovery.client.simple.instances.flaky[1].instance-id=bad",
                        "spring.cloud.loadbalancer.retry.enabled=true",
                        "spring.cloud.loadbalancer.retry.retryable-status-codes=503",
                        "spring.cloud.loadbalancer.clients.flaky.polylb.config="
                                + "loadbalance=p2c&seed=9&outlier.consecutiveFailures=3&outlier.maxEjectionPercent=50")
                .run();
        closeLater(context);
        WebClient web = context.getBean(WebClient.Builder.class).build();
        PolylbClient client = context.getBean(LoadBalancerClientFactory.class).getInstance("flaky", PolylbClient.class);
        Map<String, Long> ids = null;
        for (int i = 0; i < 60; i++) {
            int status = web.get().uri("http://flaky/").exchangeToMono(r -> r.releaseBody().thenReturn(r.statusCode().value()))
                    .block();
            assertEquals(200, status, "a 503 is retried on the other instance");
            if (ids == null) {
                ids = client.instances().ids();
            }
            assertEquals(ids, client.instances().ids(), "ids changed after request " + i + ": " + client.statsJson());
        }
        // Three 503s in a row eject it; the retries go to good, and later requests no longer try bad.
        assertTrue(bad.hits.get() <= 4, bad.hits.get() + " requests reached the failing instance: " + client.statsJson());
        assertTrue(Stats.flag(client.statsJson(), bad.address(), "ejected"), client.statsJson());
        assertEquals(bad.hits.get(), Stats.number(client.statsJson(), bad.address(), "failures"), client.statsJson());
        assertEquals(0, client.requestsInFlight());
        assertEquals(0, Stats.active(client.statsJson()), client.statsJson());
    }
}
