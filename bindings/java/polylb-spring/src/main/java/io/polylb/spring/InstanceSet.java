package io.polylb.spring;

import io.polylb.Balancer;
import io.polylb.Invoker;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.springframework.cloud.client.ServiceInstance;

/**
 * The instances a client balances over, with a polylb id for each that stays the same across
 * updates for as long as the instance stays in the list, so round-robin positions, calls in
 * flight and latency history survive discovery refreshes.
 */
final class InstanceSet {
    /** Spring Cloud's zone preference reads the same metadata key. */
    static final String ZONE_KEY = "zone";
    static final String WEIGHT_KEY = "weight";

    private final Balancer balancer;
    private final Map<String, Long> idsByKey = new ConcurrentHashMap<>();
    private long nextId = 1;
    private List<ServiceInstance> lastList;
    private List<Invoker> lastInvokers = List.of();
    private volatile Map<Long, ServiceInstance> byId = Map.of();

    InstanceSet(Balancer balancer) {
        this.balancer = balancer;
    }

    /** The stable key of an instance: its instanceId, else host:port. */
    static String keyOf(ServiceInstance instance) {
        String id = instance.getInstanceId();
        return id != null && !id.isEmpty() ? id : instance.getHost() + ":" + instance.getPort();
    }

    static int weightOf(ServiceInstance instance) {
        String w = instance.getMetadata() == null ? null : instance.getMetadata().get(WEIGHT_KEY);
        if (w == null || w.isBlank()) {
            return Invoker.DEFAULT_WEIGHT;
        }
        try {
            return Math.max(0, Integer.parseInt(w.trim()));
        } catch (NumberFormatException notANumber) {
            // Discovery metadata is not ours to validate: a typo must not stop the calls.
            return Invoker.DEFAULT_WEIGHT;
        }
    }

    /**
     * Makes the balancer's set the given list (a no-op when nothing changed), returning the
     * instance for each id of the set now in force.
     */
    synchronized Map<Long, ServiceInstance> sync(List<ServiceInstance> list) {
        if (list == lastList) {
            return byId;
        }
        List<Invoker> invokers = new ArrayList<>(list.size());
        Map<Long, ServiceInstance> instances = new HashMap<>();
        Map<String, Long> ids = new HashMap<>();
        for (ServiceInstance instance : list) {
            String key = keyOf(instance);
            if (ids.containsKey(key)) {
                continue; // the same instance listed twice: one invoker
            }
            long id = idsByKey.containsKey(key) ? idsByKey.get(key) : nextId++;
            ids.put(key, id);
            instances.put(id, instance);
            Invoker invoker = Invoker.of(id, instance.getHost() + ":" + instance.getPort())
                    .withWeight(weightOf(instance));
            String zone = PolylbSettings.zoneKey(instance.getMetadata() == null ? null : instance.getMetadata().get(ZONE_KEY));
            invokers.add(zone == null ? invoker : invoker.withZone(zone));
        }
        if (!invokers.equals(lastInvokers)) {
            // A choice running concurrently may get an id of the old set until the update is in
            // force and of the new one after: both must be found meanwhile (ids are never reused).
            Map<Long, ServiceInstance> both = new HashMap<>(byId);
            both.putAll(instances);
            byId = both;
            balancer.update(invokers);
            lastInvokers = invokers;
        }
        // Departed instances lose their ids: one that comes back starts afresh, as a new process would.
        idsByKey.keySet().retainAll(ids.keySet());
        idsByKey.putAll(ids);
        lastList = list;
        byId = Map.copyOf(instances);
        return byId;
    }

    /** The ids in force, for tests and diagnostics. */
    Map<String, Long> ids() {
        return Map.copyOf(idsByKey);
    }

    ServiceInstance instance(long id) {
        return byId.get(id);
    }

    /** The id of an instance in the set, or null; lock-free (an update only adds and drops keys). */
    Long idOf(ServiceInstance instance) {
        return idsByKey.get(keyOf(instance));
    }
}
