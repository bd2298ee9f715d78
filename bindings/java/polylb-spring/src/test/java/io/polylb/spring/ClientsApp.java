package io.polylb.spring;

import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.cloud.client.loadbalancer.LoadBalanced;
import org.springframework.cloud.loadbalancer.annotation.LoadBalancerClients;
import org.springframework.cloud.openfeign.EnableFeignClients;
import org.springframework.cloud.openfeign.FeignClient;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.client.RestClient;
import org.springframework.web.client.RestTemplate;

/**
 * The other clients Spring balances: a {@code @LoadBalanced RestTemplate} and an OpenFeign client
 * (service {@value #SERVICE}), with a RestClient to compare them with. Instances as in TestApp.
 */
@SpringBootConfiguration
@EnableAutoConfiguration
@EnableFeignClients(clients = ClientsApp.Orders.class)
@LoadBalancerClients(defaultConfiguration = {PolylbLoadBalancerConfiguration.class, TestInstances.class})
public class ClientsApp {
    static final String SERVICE = "orders";

    @FeignClient(name = SERVICE)
    public interface Orders {
        @GetMapping("/")
        String get();

        @GetMapping("/")
        String get(@RequestHeader("X-User") String user);
    }

    @Bean
    @LoadBalanced
    RestTemplate restTemplate() {
        return new RestTemplate();
    }

    @Bean
    @LoadBalanced
    RestClient.Builder restClientBuilder() {
        return RestClient.builder();
    }

    static ConfigurableApplicationContext start(String... properties) {
        return new SpringApplicationBuilder(ClientsApp.class)
                .web(WebApplicationType.NONE)
                .properties("spring.main.banner-mode=off", "spring.cloud.loadbalancer.cache.enabled=false",
                        // GatewayTest puts the Gateway on the classpath; it needs a reactive web server
                        GatewayTest.OFF)
                .properties(properties)
                .run();
    }
}
