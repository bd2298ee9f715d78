package io.polylb.grpc;

import io.grpc.EquivalentAddressGroup;
import io.grpc.NameResolver;
import io.grpc.NameResolverProvider;
import io.grpc.Status;
import java.net.URI;
import java.util.List;
import java.util.Map;

/** A resolver the test drives: it hands the channel the endpoints (and service config) it is given. */
final class ManualResolver extends NameResolverProvider {
    static final String SCHEME = "manual";

    private volatile List<EquivalentAddressGroup> endpoints;
    private volatile Map<String, ?> serviceConfig;
    private volatile Resolver resolver;
    /** How often the channel asked for a new resolution (its policy's refreshNameResolution). */
    final java.util.concurrent.atomic.AtomicInteger refreshes = new java.util.concurrent.atomic.AtomicInteger();

    ManualResolver(List<EquivalentAddressGroup> endpoints) {
        this.endpoints = endpoints;
    }

    /** Sends a new list to the channel. */
    void setEndpoints(List<EquivalentAddressGroup> newEndpoints) {
        endpoints = newEndpoints;
        resolver.push();
    }

    /**
     * Sends a service config of the resolver's own (it overrides the channel's default); before
     * the channel starts resolving, its first resolution carries it.
     */
    void setServiceConfig(Map<String, ?> config) {
        serviceConfig = config;
        Resolver started = resolver;
        if (started != null) {
            started.push();
        }
    }

    @Override
    public NameResolver newNameResolver(URI targetUri, NameResolver.Args args) {
        resolver = new Resolver(args);
        return resolver;
    }

    @Override
    public String getDefaultScheme() {
        return SCHEME;
    }

    @Override
    protected boolean isAvailable() {
        return true;
    }

    @Override
    protected int priority() {
        return 5;
    }

    private final class Resolver extends NameResolver {
        private final Args args;
        private Listener2 listener;

        Resolver(Args args) {
            this.args = args;
        }

        @Override
        public void start(Listener2 newListener) {
            listener = newListener;
            push();
        }

        void push() {
            args.getSynchronizationContext().execute(() -> {
                ResolutionResult.Builder result = ResolutionResult.newBuilder().setAddressesOrError(
                        io.grpc.StatusOr.fromValue(endpoints));
                Map<String, ?> config = serviceConfig;
                if (config != null) {
                    result.setServiceConfig(args.getServiceConfigParser().parseServiceConfig(config));
                }
                Status unused = listener.onResult2(result.build());
            });
        }

        @Override
        public String getServiceAuthority() {
            return "test";
        }

        @Override
        public void refresh() {
            refreshes.incrementAndGet();
        }

        @Override
        public void shutdown() {}
    }
}
