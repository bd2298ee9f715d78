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
    /** Dubbo's default weight, the one {@link #of} gives. */
    public static final int DEFAULT_WEIGHT = 100;

    /**
     * An invoker; the values are checked by {@link Balancer#update}, not here.
     *
     * @param id          the caller's stable identity, unique in a set, {@code 0 <= id <= Long.MAX_VALUE}
     * @param address     {@code host:port}
     * @param weight      {@code >= 0}
     * @param startTimeMs provider start time, Unix ms; {@code <= 0} means unknown (no warm-up)
     * @param warmupMs    warm-up period in ms; negative means the balancer's default
     * @param zone        optional zone, or null (an empty zone is no zone)
     * @throws NullPointerException if {@code address} is null
     */
    public Invoker {
        Objects.requireNonNull(address, "address");
    }

    /**
     * An invoker with Dubbo's defaults: weight 100, no start time, default warm-up, no zone.
     *
     * @param id      the caller's stable identity, unique in a set, {@code 0 <= id <= Long.MAX_VALUE}
     * @param address {@code host:port}
     * @return the invoker
     * @throws NullPointerException if {@code address} is null
     */
    public static Invoker of(long id, String address) {
        return new Invoker(id, address, DEFAULT_WEIGHT, 0, -1, null);
    }

    /**
     * A copy with another weight.
     *
     * @param newWeight the weight, {@code >= 0}
     * @return the copy
     */
    public Invoker withWeight(int newWeight) {
        return new Invoker(id, address, newWeight, startTimeMs, warmupMs, zone);
    }

    /**
     * A copy with another start time.
     *
     * @param newStartTimeMs provider start time, Unix ms; {@code <= 0} means unknown (no warm-up)
     * @return the copy
     */
    public Invoker withStartTimeMs(long newStartTimeMs) {
        return new Invoker(id, address, weight, newStartTimeMs, warmupMs, zone);
    }

    /**
     * A copy with another warm-up period.
     *
     * @param newWarmupMs warm-up period in ms; negative means the balancer's default
     * @return the copy
     */
    public Invoker withWarmupMs(int newWarmupMs) {
        return new Invoker(id, address, weight, startTimeMs, newWarmupMs, zone);
    }

    /**
     * A copy with another zone.
     *
     * @param newZone the zone, or null (an empty zone is no zone)
     * @return the copy
     */
    public Invoker withZone(String newZone) {
        return new Invoker(id, address, weight, startTimeMs, warmupMs, newZone);
    }
}
