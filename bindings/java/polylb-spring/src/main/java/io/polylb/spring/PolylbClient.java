package io.polylb.spring;

import io.polylb.Balancer;
import io.polylb.PolylbException;
import java.time.Duration;

/**
 * One load-balanced client's polylb state (a Spring Cloud LoadBalancer child context holds one):
 * the native balancer, its instance ids and the requests in flight. Closed with the context.
 */
public final class PolylbClient implements AutoCloseable {
    private final String serviceId;
    private final Balancer balancer;
    private final InstanceSet instances;
    private final InFlight inFlight;
    private final HttpOutcomes outcomes;
    private final HashKey hashKey;

    PolylbClient(String serviceId, PolylbSettings settings) {
        this.serviceId = serviceId;
        this.balancer = open(serviceId, settings.config(), settings.configSource());
        this.instances = new InstanceSet(balancer);
        this.inFlight = new InFlight(balancer, settings.leaseTimeout().toNanos());
        this.outcomes = new HttpOutcomes(settings.failureStatuses(), settings.timeoutStatuses());
        this.hashKey = settings.hashKey();
    }

    /** A balancer of {@code config}, or the error naming the client, the config and where it came from. */
    static Balancer open(String serviceId, String config, String configSource) {
        try {
            return new Balancer(config);
        } catch (PolylbException bad) {
            throw new IllegalArgumentException("polylb config '" + config + "' of load-balanced client '"
                    + serviceId + "' (from " + configSource + ") is invalid: " + bad.getMessage(), bad);
        }
    }

    public String serviceId() {
        return serviceId;
    }

    /** polylb's counters for this client's instances (Balancer#statsJson). */
    public String statsJson() {
        return balancer.statsJson();
    }

    /** Requests started and not yet completed or given up. */
    public int requestsInFlight() {
        return inFlight.open();
    }

    /** Ends now, as {@code CANCELLED}, every request older than {@code age} (the sweep, on demand). */
    public void cancelOlderThan(Duration age) {
        inFlight.cancelStartedBefore(System.nanoTime() - age.toNanos());
    }

    Balancer balancer() {
        return balancer;
    }

    InstanceSet instances() {
        return instances;
    }

    InFlight inFlight() {
        return inFlight;
    }

    /** The key's bytes for a request to a hashing strategy; null (no key) for the other strategies. */
    byte[] hashKeyOf(org.springframework.cloud.client.loadbalancer.Request<?> request) {
        return hashKey == null ? null : hashKey.of(request);
    }

    HttpOutcomes outcomes() {
        return outcomes;
    }

    @Override
    public void close() {
        balancer.close();
    }
}
