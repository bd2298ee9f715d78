package io.polylb;

import java.util.Objects;

/**
 * One provider as registered with a {@link Balancer}.
 *
 * @param id          the caller's stable identity, unique in a set, {@code 0 <= id <= Long.MAX_VALUE}
 * @param address     {@code host:port}; places the invoker on consistent-hash rings (as Dubbo's URL address)
 * @param weight      {@code >= 0}; Dubbo's default is 100
 * @param startTimeMs provider start time, Unix ms; {@code <= 0} means unknown (no warm-up)
 * @param warmupMs    warm-up period in ms; negative means the balancer's default (Dubbo: 600000)
 * @param zone        optional zone, or null
 */
public record Invoker(long id, String address, int weight, long startTimeMs, int warmupMs, String zone) {
    public static final int DEFAULT_WEIGHT = 100;

    public Invoker {
        Objects.requireNonNull(address, "address");
    }

    /** An invoker with Dubbo's defaults: weight 100, no start time, default warm-up, no zone. */
    public static Invoker of(long id, String address) {
        return new Invoker(id, address, DEFAULT_WEIGHT, 0, -1, null);
    }

    public Invoker withWeight(int newWeight) {
        return new Invoker(id, address, newWeight, startTimeMs, warmupMs, zone);
    }

    public Invoker withStartTimeMs(long newStartTimeMs) {
        return new Invoker(id, address, weight, newStartTimeMs, warmupMs, zone);
    }

    public Invoker withWarmupMs(int newWarmupMs) {
        return new Invoker(id, address, weight, startTimeMs, newWarmupMs, zone);
    }

    public Invoker withZone(String newZone) {
        return new Invoker(id, address, weight, startTimeMs, warmupMs, newZone);
    }
}
