package io.polylb.spring;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.loadbalancer.LoadBalanced;
import org.springframework.cloud.loadbalancer.annotation.LoadBalancerClients;
import org.springframework.cloud.loadbalancer.support.LoadBalancerClientFactory;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.web.client.RestClient;
import org.springframework.web.reactive.function.client.WebClient;

/** A Boot application whose every load-balanced client is balanced by polylb. */
@SpringBootConfiguration
@EnableAutoConfiguration
@LoadBalancerClients(defaultConfiguration = {PolylbLoadBalancerConfiguration.class, TestInstances.class})
public class TestApp {
    /** What discovery says, per service: tests change it to churn the list. */
    static final Map<String, List<ServiceInstance>> DISCOVERY = new ConcurrentHashMap<>();

    @Bean
    @LoadBalanced
    WebClient.Builder webClientBuilder() {
        return WebClient.builder();
    }

    @Bean
    @LoadBalanced
    RestClient.Builder restClientBuilder() {
        return RestClient.builder();
    }

    static ConfigurableApplicationContext start(String... properties) {
        return new SpringApplicationBuilder(TestApp.class)
                .web(WebApplicationType.NONE)
                .properties("spring.main.banner-mode=off", "spring.cloud.loadbalancer.cache.enabled=false",
                        // GatewayTest puts the Gateway on the classpath; it needs a reactive web server
                        GatewayTest.OFF)
                .properties(properties)
                .run();
    }

    static PolylbClient client(ConfigurableApplicationContext context, String serviceId) {
        return context.getBean(LoadBalancerClientFactory.class).getInstance(serviceId, PolylbClient.class);
    }
}
