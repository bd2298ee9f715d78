package io.polylb.grpc;

import io.grpc.LoadBalancer;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

/**
 * gRPC's client-side health checking ({@code healthCheckConfig} in the service config) for the
 * policy, when the application has grpc-services on its classpath: gRPC-java applies it only to
 * policies that wrap themselves with {@code HealthCheckingLoadBalancerUtil}, as its own
 * round_robin does there. Found by reflection, so that the policy keeps depending on
 * grpc-api alone; without grpc-services the policy runs unwrapped (no health checks, as
 * round_robin without it).
 */
final class HealthChecking {
    private static final Method WRAP = find();

    private HealthChecking() {}

    private static Method find() {
        try {
            return Class.forName("io.grpc.protobuf.services.HealthCheckingLoadBalancerUtil")
                    .getMethod("newHealthCheckingLoadBalancer", LoadBalancer.Factory.class, LoadBalancer.Helper.class);
        } catch (ReflectiveOperationException | LinkageError absent) {
            return null;
        }
    }

    /** Whether grpc-services was found, so that policies are health-checking-capable. */
    static boolean available() {
        return WRAP != null;
    }

    static LoadBalancer newLoadBalancer(LoadBalancer.Factory policy, LoadBalancer.Helper helper) {
        if (WRAP == null) {
            return policy.newLoadBalancer(helper);
        }
        try {
            return (LoadBalancer) WRAP.invoke(null, policy, helper);
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof RuntimeException) {
                throw (RuntimeException) cause;
            }
            if (cause instanceof Error) {
                throw (Error) cause;
            }
            throw new IllegalStateException("polylb: gRPC's health checking failed to start", cause);
        } catch (IllegalAccessException e) {
            return policy.newLoadBalancer(helper);
        }
    }
}
