package io.polylb.grpc;

import io.grpc.LoadBalancer;
import io.grpc.LoadBalancerProvider;
import io.grpc.NameResolver.ConfigOrError;
import io.grpc.Status;
import io.polylb.Balancer;
import io.polylb.PolylbException;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.function.Consumer;
import java.util.function.UnaryOperator;

/**
 * The "polylb" load-balancing policy, registered through {@code META-INF/services}. Its
 * service-config entry is {@code {"config": "<polylb config string>", "serviceLevel": false,
 * "enableOobLoadReport": false, "oobReportingPeriod": "10s"}}, every key optional.
 *
 * <p>To read the policy's {@link Balancer} (e.g. its {@link Balancer#statsJson() stats}), register
 * a provider of your own under another name, with an observer, and name that policy in the
 * service config:
 *
 * <pre>{@code
 * LoadBalancerRegistry.getDefaultRegistry().register(
 *     new PolylbLoadBalancerProvider("polylb_observed", balancer -> current.set(balancer)));
 * }</pre>
 *
 * <p>Register a name once per JVM: gRPC's registry keeps the first provider registered under a
 * name (every instance has the same priority) and ignores a later one, whose observer then never
 * hears of a balancer. Register it once (a static initializer) and share its observer, give each
 * registration its own name, or {@code deregister} the provider once its channels are shut down.
 */
public final class PolylbLoadBalancerProvider extends LoadBalancerProvider {
    private static final Set<String> ENTRY_KEYS =
            Set.of("config", "serviceLevel", "enableOobLoadReport", "oobReportingPeriod");
    /** A google.protobuf.Duration in JSON, as gRPC's service configs write durations: "10s", "0.5s". */
    private static final Pattern DURATION = Pattern.compile("(\\d{1,9})(?:\\.(\\d{1,9}))?s");

    private final String policyName;
    private final Consumer<Balancer> observer;

    /** The "polylb" policy, without an observer (what the ServiceLoader instantiates). */
    public PolylbLoadBalancerProvider() {
        this(PolylbGrpc.POLICY_NAME, balancer -> {});
    }

    /**
     * The policy under {@code policyName}; {@code observer} is handed each {@link Balancer} the
     * policy creates (one per channel, a new one when the channel's config changes, and a new one
     * each time the channel leaves idle mode, which closes the previous one). The balancer is the
     * policy's: read it, never update or close it.
     *
     * @param policyName the name a service config's {@code loadBalancingConfig} selects it by
     * @param observer   called with each balancer the policy creates
     * @throws NullPointerException if an argument is null
     */
    public PolylbLoadBalancerProvider(String policyName, Consumer<Balancer> observer) {
        this.policyName = Objects.requireNonNull(policyName, "policyName");
        this.observer = Objects.requireNonNull(observer, "observer");
    }

    @Override
    public boolean isAvailable() {
        return true;
    }

    @Override
    public int getPriority() {
        return 5; // gRPC's default for a policy; only one provider per name is in use anyway
    }

    @Override
    public String getPolicyName() {
        return policyName;
    }

    /**
     * The policy, health-checking-capable when grpc-services is on the classpath (see {@link
     * HealthChecking}).
     */
    @Override
    public LoadBalancer newLoadBalancer(LoadBalancer.Helper helper) {
        return newLoadBalancer(helper, UnaryOperator.identity());
    }

    /** {@code inner} wraps the helper the policy itself sees, under health checking's (tests). */
    LoadBalancer newLoadBalancer(LoadBalancer.Helper helper, UnaryOperator<LoadBalancer.Helper> inner) {
        return HealthChecking.newLoadBalancer(new LoadBalancer.Factory() {
            @Override
            public LoadBalancer newLoadBalancer(LoadBalancer.Helper wrapped) {
                return new PolylbLoadBalancer(inner.apply(wrapped), observer);
            }
        }, helper);
    }

    /**
     * Checks the config string by building a balancer from it, so that a bad string is the
     * service config's error, naming the key (and the nearest valid one), before any RPC.
     * Errors are UNAVAILABLE, as grpc-java's own policies give theirs: a control plane's
     * INVALID_ARGUMENT would reach RPCs as INTERNAL (gRFC A54), and grpc-go fails them
     * UNAVAILABLE for the same service config.
     */
    @Override
    public ConfigOrError parseLoadBalancingPolicyConfig(Map<String, ?> raw) {
        // A misspelt key would otherwise be skipped and the entry mean the default strategy.
        for (String key : new TreeSet<>(raw.keySet())) {
            if (!ENTRY_KEYS.contains(key)) {
                return ConfigOrError.fromError(Status.UNAVAILABLE.withDescription(
                        "polylb: unknown key " + Excerpts.quoted(key) + " in loadBalancingConfig " + Excerpts.excerpt(raw)
                                + " (its keys are \"config\", \"serviceLevel\", \"enableOobLoadReport\" and"
                                + " \"oobReportingPeriod\", as spelt)"));
            }
        }
        Object config = raw.containsKey("config") ? raw.get("config") : "";
        Object serviceLevel = raw.containsKey("serviceLevel") ? raw.get("serviceLevel") : Boolean.FALSE;
        Object oob = raw.containsKey("enableOobLoadReport") ? raw.get("enableOobLoadReport") : Boolean.FALSE;
        Object period = raw.containsKey("oobReportingPeriod") ? raw.get("oobReportingPeriod") : "10s";
        long periodNanos = period instanceof String text ? durationNanos(text) : -1;
        if (!(config instanceof String) || !(serviceLevel instanceof Boolean) || !(oob instanceof Boolean)
                || periodNanos < 0) {
            return ConfigOrError.fromError(Status.UNAVAILABLE.withDescription(
                    "polylb: bad loadBalancingConfig " + Excerpts.excerpt(raw)
                            + ": want {\"config\": string, \"serviceLevel\": boolean, \"enableOobLoadReport\": boolean,"
                            + " \"oobReportingPeriod\": a duration such as \"10s\" or \"0.5s\"}"));
        }
        try {
            new Balancer((String) config).close();
        } catch (PolylbException e) {
            return ConfigOrError.fromError(Status.UNAVAILABLE
                    .withDescription("polylb: config " + Excerpts.quoted((String) config) + ": " + e.getMessage())
                    .withCause(e));
        }
        return ConfigOrError.fromConfig(
                new PolylbConfig((String) config, (Boolean) serviceLevel, (Boolean) oob, periodNanos));
    }

    /** A duration as JSON writes a google.protobuf.Duration ("10s", "0.050s"), or -1 for another text. */
    static long durationNanos(String text) {
        Matcher m = DURATION.matcher(text);
        if (!m.matches()) {
            return -1;
        }
        long nanos = 0;
        if (m.group(2) != null) {
            nanos = Long.parseLong((m.group(2) + "00000000").substring(0, 9));
        }
        return Long.parseLong(m.group(1)) * 1_000_000_000L + nanos;
    }
}
