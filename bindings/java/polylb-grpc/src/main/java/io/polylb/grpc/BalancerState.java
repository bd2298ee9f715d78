package io.polylb.grpc;

import io.polylb.Balancer;
import io.polylb.PolylbException;
import java.util.concurrent.ConcurrentHashMap;

/** One library balancer of the policy, with the method ids it interned. */
final class BalancerState {
    final Balancer balancer;
    /**
     * Whether the calls' ORCA trailers feed {@code orca} ({@code reportLoad}); false while the
     * out-of-band stream does, as gRPC's weighted_round_robin then ignores the trailers.
     */
    final boolean callLoadReports;
    private final boolean serviceLevel;
    private final ConcurrentHashMap<String, Integer> methods = new ConcurrentHashMap<>();

    BalancerState(Balancer balancer, boolean serviceLevel) {
        this(balancer, serviceLevel, true);
    }

    BalancerState(Balancer balancer, boolean serviceLevel, boolean callLoadReports) {
        this.balancer = balancer;
        this.serviceLevel = serviceLevel;
        this.callLoadReports = callLoadReports;
    }

    /**
     * The method id of a call, interned once per balancer. Named "/pkg.Service/Method" as grpc-go
     * names it, so one service's stats read the same from both languages. Past the library's
     * limit on method names (2^20) the rest share the service level.
     *
     * @throws IllegalStateException when the balancer was closed (a config change replaced it)
     */
    int method(String fullMethodName) {
        if (serviceLevel) {
            return Balancer.SERVICE_METHOD;
        }
        Integer id = methods.get(fullMethodName);
        if (id != null) {
            return id;
        }
        try {
            id = balancer.method("/" + fullMethodName);
        } catch (PolylbException limitOrText) {
            return Balancer.SERVICE_METHOD;
        }
        methods.putIfAbsent(fullMethodName, id);
        return id;
    }
}
