package io.polylb.grpc;

import io.grpc.Attributes;
import io.grpc.CallOptions;
import io.grpc.EquivalentAddressGroup;
import io.polylb.Invoker;

/**
 * The policy's name and the keys through which a resolver and a caller talk to it.
 *
 * <ul>
 *   <li>{@link #INVOKER} on an {@link EquivalentAddressGroup}: the endpoint's weight, warm-up and
 *       zone (its id and address are the policy's; an endpoint without it has Dubbo's defaults:
 *       weight 100, no warm-up, no zone).
 *   <li>{@link #HASH_KEY} on a call's {@link CallOptions}: the key {@code consistenthash},
 *       {@code boundedhash}, {@code maglev} and {@code rendezvous} place the call by (Dubbo hashes the first
 *       argument; with gRPC the caller names the key), e.g.
 *       {@code stub.withOption(PolylbGrpc.HASH_KEY, userId)}.
 * </ul>
 */
public final class PolylbGrpc {
    /** The policy's name in a service config's {@code loadBalancingConfig}. */
    public static final String POLICY_NAME = "polylb";

    /**
     * An endpoint's polylb fields: {@code weight}, {@code startTimeMs}, {@code warmupMs} and
     * {@code zone} are used; {@code id} and {@code address} are ignored (the policy numbers
     * endpoints itself and uses the endpoint's first address).
     */
    public static final Attributes.Key<Invoker> INVOKER = Attributes.Key.create("io.polylb.grpc.invoker");

    /**
     * The hash key of a call, for {@code consistenthash}, {@code boundedhash}, {@code maglev} and
     * {@code rendezvous}.
     */
    public static final CallOptions.Key<byte[]> HASH_KEY = CallOptions.Key.create("io.polylb.grpc.hashKey");

    private PolylbGrpc() {}

    /**
     * {@code endpoint} with its polylb fields (see {@link #INVOKER}).
     *
     * @param endpoint the resolver's endpoint
     * @param fields   its weight, start time, warm-up and zone ({@code id} and {@code address} are ignored)
     * @return a new endpoint: the same addresses and attributes, plus {@link #INVOKER}
     */
    public static EquivalentAddressGroup withInvoker(EquivalentAddressGroup endpoint, Invoker fields) {
        Attributes attributes = endpoint.getAttributes().toBuilder().set(INVOKER, fields).build();
        return new EquivalentAddressGroup(endpoint.getAddresses(), attributes);
    }

    /**
     * {@code endpoint} with a weight (Dubbo's default is 100) and otherwise Dubbo's defaults.
     *
     * @param endpoint the resolver's endpoint
     * @param weight   its weight (the policy counts a negative one as 0)
     * @return a new endpoint: the same addresses and attributes, plus {@link #INVOKER}
     */
    public static EquivalentAddressGroup withWeight(EquivalentAddressGroup endpoint, int weight) {
        return withInvoker(endpoint, Invoker.of(0, "").withWeight(weight));
    }
}
