package io.polylb.spring;

import io.polylb.Balancer;
import io.polylb.PolylbException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
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
        // get(request) may leave instances out for this request alone: Spring's retry leaves out
        // the instance just tried (RetryAwareServiceInstanceListSupplier), hints and sticky
        // sessions narrow it down. Such a list restricts this pick only; polylb's set, with the
        // ids, counts and ejections of its instances, is the service's list, get().
        return supplier.get(request).next().flatMap(candidates -> supplier.get().next()
                .defaultIfEmpty(candidates)
                .map(all -> choose(all, candidates, client.hashKeyOf(request))));
    }

    Response<ServiceInstance> choose(List<ServiceInstance> list) {
        return choose(list, list, null);
    }

    /**
     * Picks among {@code candidates} by {@code key} (the hashing strategies' key, else null),
     * keeping polylb's set {@code all} (and any candidate not in it).
     */
    Response<ServiceInstance> choose(List<ServiceInstance> all, List<ServiceInstance> candidates, byte[] key) {
        client.inFlight().sweepIfDue();
        if (candidates.isEmpty()) {
            return new EmptyResponse();
        }
        InstanceSet instances = client.instances();
        List<ServiceInstance> members = all == candidates ? all : withCandidates(all, candidates);
        Map<Long, ServiceInstance> set = instances.sync(members);
        Balancer lb = client.balancer();
        long[] among = members == candidates ? null : idsAmong(candidates, set.size());
        // Concurrent choices with other lists may replace the set between this sync and the pick,
        // and again before the lookup: ids are never reused, so a pick whose instance cannot be
        // found is of a set already gone, and picking again gets one of the set in force.
        for (int attempt = 0; attempt < MAX_PICKS; attempt++) {
            long id;
            try {
                id = among == null ? lb.select(Balancer.SERVICE_METHOD, key)
                        : lb.selectAmong(Balancer.SERVICE_METHOD, key, among, null);
            } catch (PolylbException noProvider) {
                if (among == null) {
                    return new EmptyResponse(); // e.g. every instance weighs 0
                }
                // a concurrent update may have dropped a candidate's id: take the ids in force
                among = idsAmong(candidates, -1);
                continue;
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

    /** {@code all}, the same list object when it holds every candidate, else with the others added. */
    private static List<ServiceInstance> withCandidates(List<ServiceInstance> all, List<ServiceInstance> candidates) {
        Set<String> keys = new HashSet<>();
        for (ServiceInstance instance : all) {
            keys.add(InstanceSet.keyOf(instance));
        }
        List<ServiceInstance> members = null;
        for (ServiceInstance candidate : candidates) {
            if (keys.add(InstanceSet.keyOf(candidate))) {
                if (members == null) {
                    members = new ArrayList<>(all);
                }
                members.add(candidate);
            }
        }
        return members == null ? all : members;
    }

    /** The ids of the candidates in the set; null (the whole set) when they are all {@code setSize} of it or none. */
    private long[] idsAmong(List<ServiceInstance> candidates, int setSize) {
        long[] ids = new long[candidates.size()];
        int n = 0;
        for (ServiceInstance candidate : candidates) {
            Long id = client.instances().idOf(candidate);
            if (id != null) {
                ids[n++] = id;
            }
        }
        long[] distinct = Arrays.stream(ids, 0, n).distinct().toArray();
        // none found: a concurrent update replaced them all; the whole set, as a plain choice would
        return distinct.length == setSize || distinct.length == 0 ? null : distinct;
    }

    /** Picks tried while concurrent updates keep replacing the set under them. */
    private static final int MAX_PICKS = 8;
}
