package io.polylb.spring;

import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.loadbalancer.core.ReactorLoadBalancer;
import org.springframework.cloud.loadbalancer.core.ServiceInstanceListSupplier;
import org.springframework.cloud.loadbalancer.support.LoadBalancerClientFactory;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.env.Environment;

/**
 * Makes polylb the load balancer of a client:
 * {@code @LoadBalancerClient(name = "orders", configuration = PolylbLoadBalancerConfiguration.class)},
 * or of every client: {@code @LoadBalancerClients(defaultConfiguration = PolylbLoadBalancerConfiguration.class)}.
 * Like any such configuration it is loaded into each client's own child context, so it must not
 * be picked up by component scanning of the application itself.
 */
@Configuration(proxyBeanMethods = false)
public class PolylbLoadBalancerConfiguration {

    @Bean(destroyMethod = "close")
    public PolylbClient polylbClient(Environment env) {
        String serviceId = env.getProperty(LoadBalancerClientFactory.PROPERTY_NAME);
        return new PolylbClient(serviceId, PolylbSettings.of(env, serviceId));
    }

    @Bean
    public ReactorLoadBalancer<ServiceInstance> reactorServiceInstanceLoadBalancer(
            LoadBalancerClientFactory factory, PolylbClient client) {
        return new PolylbLoadBalancer(
                factory.getLazyProvider(client.serviceId(), ServiceInstanceListSupplier.class), client);
    }

    @Bean
    public PolylbLifecycle polylbLifecycle(PolylbClient client) {
        return new PolylbLifecycle(client);
    }
}
