package io.polylb.spring;

import io.polylb.Balancer;
import io.polylb.PolylbException;
import java.util.List;
import java.util.Map;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.loadbalancer.DefaultResponse;
import org.springframework.cloud.client.loadbalancer.EmptyResponse;
import org.springframework.cloud.client.loadbalancer.Request;
import org.springframework.cloud.client.loadbalancer.Response;
import org.springframework.cloud.loadbalancer.core.NoopServiceInstanceListSupplier;
import org.springframework.cloud.loadbalancer.core.ReactorServiceInstanceLoadBalancer;
import org.springframework.cloud.loadbalancer.core.ServiceInstanceListSupplier;
import reactor.core.publisher.Mono;

/**
 * Spring Cloud LoadBalancer's choice made by polylb.
 *
 * <p>A choice is not yet a request: {@code LoadBalancerClient.choose()} may be called by code
 * that never sends anything, and then no lifecycle callback follows. So {@code choose} picks
 * without leaving the pick in flight (it is reported {@code CANCELLED} at once, which undoes only
 * the count), and {@link PolylbLifecycle} counts the request in flight from Spring's
 * {@code onStartRequest}, when it is really sent. A choice nobody sends cannot leak.
 */
public final class PolylbLoadBalancer implements ReactorServiceInstanceLoadBalancer {
    private final ObjectProvider<ServiceInstanceListSupplier> suppliers;
    private final PolylbClient client;

    public PolylbLoadBalancer(ObjectProvider<ServiceInstanceListSupplier> suppliers, PolylbClient client) {
        this.suppliers = suppliers;
        this.client = client;
    }

    @Override
    @SuppressWarnings("rawtypes")
    public Mono<Response<ServiceInstance>> choose(Request request) {
        ServiceInstanceListSupplier supplier = suppliers.getIfAvailable(NoopServiceInstanceListSupplier::new);
        return supplier.get(request).next().map(this::choose);
    }

    Response<ServiceInstance> choose(List<ServiceInstance> list) {
        client.inFlight().sweepIfDue();
        if (list.isEmpty()) {
            return new EmptyResponse();
        }
        Map<Long, ServiceInstance> set = client.instances().sync(list);
        Balancer lb = client.balancer();
        // Concurrent choices with other lists may replace the set between this sync and the pick,
        // and again before the lookup: ids are never reused, so a pick whose instance cannot be
        // found is of a set already gone, and picking again gets one of the set in force.
        for (int attempt = 0; attempt < MAX_PICKS; attempt++) {
            long id;
            try {
                id = lb.select(Balancer.SERVICE_METHOD);
            } catch (PolylbException noProvider) {
                return new EmptyResponse(); // e.g. every instance weighs 0
            }
            lb.report(Balancer.SERVICE_METHOD, id, 0, io.polylb.Outcome.CANCELLED);
            ServiceInstance chosen = set.get(id);
            if (chosen == null) {
                chosen = client.instances().instance(id);
            }
            if (chosen != null) {
                return new DefaultResponse(chosen);
            }
        }
        return new EmptyResponse();
    }

    /** Picks tried while concurrent updates keep replacing the set under them. */
    private static final int MAX_PICKS = 8;
}
