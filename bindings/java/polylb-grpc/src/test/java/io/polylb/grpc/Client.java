package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.CallOptions;
import io.grpc.ConnectivityState;
import io.grpc.EquivalentAddressGroup;
import io.grpc.LoadBalancer;
import io.grpc.LoadBalancerProvider;
import io.grpc.LoadBalancerRegistry;
import io.grpc.ManagedChannel;
import io.grpc.MethodDescriptor;
import io.grpc.NameResolver;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import io.grpc.util.ForwardingLoadBalancerHelper;
import io.polylb.Balancer;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;

/**
 * A channel under the policy, registered under a name of its own with an observer so that the
 * test reads the policy's balancer, over endpoints a {@link ManualResolver} gives.
 */
final class Client implements AutoCloseable {
    private static final AtomicInteger NEXT = new AtomicInteger();

    final ManualResolver resolver;
    final ManagedChannel channel;
    final AtomicReference<Balancer> balancer = new AtomicReference<>();
    final String policyName = "polylb_test_" + NEXT.incrementAndGet();
    /** The picker the policy last sent up. */
    final AtomicReference<LoadBalancer.SubchannelPicker> picker = new AtomicReference<>();
    private final LoadBalancerProvider provider = new Watched();

    /** The policy under the test's name, with a helper that keeps the pickers it sends up. */
    private final class Watched extends LoadBalancerProvider {
        private final PolylbLoadBalancerProvider policy = new PolylbLoadBalancerProvider(policyName, balancer::set);

        @Override
        public boolean isAvailable() {
            return true;
        }

        @Override
        public int getPriority() {
            return 5;
        }

        @Override
        public String getPolicyName() {
            return policyName;
        }

        @Override
        public NameResolver.ConfigOrError parseLoadBalancingPolicyConfig(Map<String, ?> raw) {
            return policy.parseLoadBalancingPolicyConfig(raw);
        }

        /** The pickers are kept where the policy sends them, under health checking's helper. */
        @Override
        public LoadBalancer newLoadBalancer(LoadBalancer.Helper helper) {
            return policy.newLoadBalancer(helper, inner -> new ForwardingLoadBalancerHelper() {
                @Override
                protected LoadBalancer.Helper delegate() {
                    return inner;
                }

                @Override
                public void updateBalancingState(ConnectivityState state, LoadBalancer.SubchannelPicker newPicker) {
                    picker.set(newPicker);
                    super.updateBalancingState(state, newPicker);
                }
            });
        }
    }

    Client(String config, List<EquivalentAddressGroup> endpoints) {
        this(config, false, endpoints);
    }

    Client(String config, boolean serviceLevel, List<EquivalentAddressGroup> endpoints) {
        this(config, serviceLevel, endpoints, true);
    }

    Client(String config, boolean serviceLevel, List<EquivalentAddressGroup> endpoints, boolean retries) {
        this(config, serviceLevel, endpoints, retries, Map.of());
    }

    /** {@code moreConfig}: service config entries beside the policy's, e.g. a methodConfig. */
    Client(String config, boolean serviceLevel, List<EquivalentAddressGroup> endpoints, boolean retries,
            Map<String, ?> moreConfig) {
        this(entry(config, serviceLevel), endpoints, retries, moreConfig);
    }

    /** {@code entry}: the policy's whole service-config entry, e.g. with "enableOobLoadReport". */
    Client(Map<String, ?> entry, List<EquivalentAddressGroup> endpoints) {
        this(entry, endpoints, true, Map.of());
    }

    @SuppressWarnings("deprecation") // nameResolverFactory: the simplest way to a test resolver
    private Client(Map<String, ?> entry, List<EquivalentAddressGroup> endpoints, boolean retries,
            Map<String, ?> moreConfig) {
        LoadBalancerRegistry.getDefaultRegistry().register(provider);
        resolver = new ManualResolver(endpoints);
        Map<String, Object> serviceConfig = new HashMap<>(serviceConfig(entry));
        serviceConfig.putAll(moreConfig);
        NettyChannelBuilder builder = NettyChannelBuilder.forTarget(ManualResolver.SCHEME + ":///providers")
                .nameResolverFactory(resolver)
                .usePlaintext()
                .defaultServiceConfig(serviceConfig);
        channel = (retries ? builder.enableRetry() : builder.disableRetry()).build();
    }

    /** {@code {"loadBalancingConfig": [{"<policy>": {"config": ..., "serviceLevel": ...}}]}} */
    Map<String, ?> serviceConfig(String config, boolean serviceLevel) {
        return serviceConfig(entry(config, serviceLevel));
    }

    /** {@code {"loadBalancingConfig": [{"<policy>": entry}]}} */
    Map<String, ?> serviceConfig(Map<String, ?> entry) {
        return Map.of("loadBalancingConfig", List.of(Map.of(policyName, entry)));
    }

    private static Map<String, ?> entry(String config, boolean serviceLevel) {
        Map<String, Object> entry = new HashMap<>();
        entry.put("config", config);
        entry.put("serviceLevel", serviceLevel);
        return entry;
    }

    String call(String request) {
        return call(EchoService.CALL, CallOptions.DEFAULT, request);
    }

    String call(MethodDescriptor<String, String> method, CallOptions options, String request) {
        return ClientCalls.blockingUnaryCall(channel, method, options.withWaitForReady(), request);
    }

    /** The policy's balancer's stats, parsed. */
    JsonObject stats() {
        return JsonParser.parseString(balancer.get().statsJson()).getAsJsonObject();
    }

    /** Counter {@code name} (e.g. "succeeded", "active") summed over the set. */
    long total(String name) {
        long sum = 0;
        for (JsonElement invoker : stats().getAsJsonArray("invokers")) {
            sum += invoker.getAsJsonObject().get(name).getAsLong();
        }
        return sum;
    }

    int setSize() {
        Balancer current = balancer.get();
        return current == null ? 0 : stats().getAsJsonArray("invokers").size();
    }

    /** The READY endpoints of the picker the policy last sent up. */
    int readyEndpoints() {
        return picker.get() instanceof PolylbPicker current ? current.readyEndpoints() : 0;
    }

    /** Connects and waits until {@code n} endpoints are READY and in the library's set. */
    void waitForSet(int n) {
        channel.getState(true);
        eventually(() -> setSize() == n && readyEndpoints() == n, n + " READY endpoints");
    }

    /**
     * Calls until every endpoint's {@code orca} weight counts, then once more: with no blackout a
     * weight counts from its first report, and the schedule takes it up at the next pick.
     */
    void untilOrcaWeighted() {
        eventually(() -> {
            call("");
            for (JsonElement row : stats().getAsJsonArray("invokers")) {
                if (!row.getAsJsonObject().get("orca_counted").getAsBoolean()) {
                    return false;
                }
            }
            return true;
        }, "every endpoint's orca weight to count");
        call("");
    }

    static void eventually(BooleanSupplier condition, String what) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("timed out waiting for " + what);
            }
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
        }
    }

    @Override
    public void close() throws InterruptedException {
        channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        LoadBalancerRegistry.getDefaultRegistry().deregister(provider);
    }
}
