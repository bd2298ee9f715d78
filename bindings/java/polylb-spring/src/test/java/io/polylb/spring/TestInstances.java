package io.polylb.spring;

import java.util.List;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.loadbalancer.core.ServiceInstanceListSupplier;
import org.springframework.cloud.loadbalancer.support.LoadBalancerClientFactory;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.env.Environment;
import reactor.core.publisher.Flux;

/** Each client's instance list, read from TestApp.DISCOVERY at every choice (a child-context configuration). */
@Configuration(proxyBeanMethods = false)
public class TestInstances {
    @Bean
    ServiceInstanceListSupplier discoveryList(Environment env) {
        String serviceId = env.getProperty(LoadBalancerClientFactory.PROPERTY_NAME);
        return new ServiceInstanceListSupplier() {
            @Override
            public String getServiceId() {
                return serviceId;
            }

            @Override
            public Flux<List<ServiceInstance>> get() {
                return Flux.defer(() -> Flux.just(TestApp.DISCOVERY.getOrDefault(serviceId, List.of())));
            }
        };
    }
}
