package io.polylb.spring;

import java.time.Duration;
import java.util.Locale;
import org.springframework.boot.convert.DurationStyle;
import org.springframework.core.env.Environment;

/**
 * A client's settings: {@code spring.cloud.loadbalancer.clients.<serviceId>.polylb.<key>} first,
 * then {@code spring.cloud.loadbalancer.polylb.<key>}, then the default.
 */
record PolylbSettings(String config, String configSource, Duration leaseTimeout, String failureStatuses,
        String timeoutStatuses, HashKey hashKey) {
    /**
     * p2c needs nothing but the calls in flight that the lifecycle counts, honours the instances'
     * weights, and with ejection after 5 failures in a row stops sending to an instance that
     * fails hard, which in-flight counts alone cannot see (docs/strategies.md).
     */
    static final String DEFAULT_CONFIG = "loadbalance=p2c&outlier.consecutiveFailures=5";
    static final Duration DEFAULT_LEASE_TIMEOUT = Duration.ofSeconds(60);
    static final String PREFIX = "spring.cloud.loadbalancer.";

    static PolylbSettings of(Environment env, String serviceId) {
        String config = get(env, serviceId, "config", DEFAULT_CONFIG);
        String source = own(env, serviceId, "config") != null ? PREFIX + "clients." + serviceId + ".polylb.config"
                : env.getProperty(PREFIX + "polylb.config") != null ? PREFIX + "polylb.config" : "the default";
        String zone = env.getProperty(PREFIX + "zone");
        if (zone != null && !zone.isBlank() && !hasKey(config, "zone")) {
            // The zone Spring Cloud's own zone preference uses, unless the config names one.
            config = config + "&zone=" + zone.trim();
            source = source + " and " + PREFIX + "zone";
        }
        config = lowerCaseZone(config);
        Duration lease;
        String leaseText = get(env, serviceId, "lease-timeout", null);
        try {
            lease = leaseText == null ? DEFAULT_LEASE_TIMEOUT : DurationStyle.detectAndParse(leaseText);
        } catch (RuntimeException bad) {
            lease = null;
        }
        if (lease == null || lease.isNegative() || lease.isZero()) {
            throw new IllegalArgumentException(PREFIX + "polylb.lease-timeout: '" + leaseText
                    + "' is not a positive duration (e.g. 60s, 500ms)");
        }
        return new PolylbSettings(config, source, lease,
                get(env, serviceId, "failure-statuses", HttpOutcomes.DEFAULT_FAILURE_STATUSES),
                get(env, serviceId, "timeout-statuses", HttpOutcomes.DEFAULT_TIMEOUT_STATUSES),
                hashKey(env, serviceId, config, source));
    }

    /**
     * The client's hash key: required by a hashing strategy (without one every request would
     * hash alike), refused by another when set for that client alone (it would do nothing); the
     * shared {@code polylb.hash-key} serves the clients that hash and is ignored by the others.
     */
    private static HashKey hashKey(Environment env, String serviceId, String config, String configSource) {
        String ownProperty = PREFIX + "clients." + serviceId + ".polylb.hash-key";
        String own = own(env, serviceId, "hash-key");
        String shared = env.getProperty(PREFIX + "polylb.hash-key");
        String strategy = HashKey.strategyOf(config);
        boolean hashing = HashKey.HASHING_STRATEGIES.contains(strategy);
        if (own != null && !hashing) {
            // A misspelt strategy (rendezvouz, Rendezvous) hashes nothing either: the config's
            // own error names the mistake, where blaming the hash key would not.
            PolylbClient.open(serviceId, config, configSource).close();
            throw new IllegalArgumentException(ownProperty + ": '" + own + "' is set, but load-balanced client '"
                    + serviceId + "' uses loadbalance=" + strategy + " (from " + configSource
                    + "), which hashes no key; the hashing strategies are " + String.join(", ", HashKey.HASHING_STRATEGIES.stream().sorted().toList()));
        }
        if (!hashing) {
            if (shared != null) {
                HashKey.parse(shared, PREFIX + "polylb.hash-key"); // a malformed value fails anyway
            }
            return null;
        }
        if (own == null && shared == null) {
            String client = serviceId == null ? "every client" : "load-balanced client '" + serviceId + "'";
            throw new IllegalArgumentException(client + " uses loadbalance=" + strategy + " (from " + configSource
                    + ") but has no hash key: set " + (serviceId == null ? "" : ownProperty + " or ")
                    + PREFIX + "polylb.hash-key to header:<Name>, cookie:<name> or query:<param>");
        }
        return own != null ? HashKey.parse(own, ownProperty) : HashKey.parse(shared, PREFIX + "polylb.hash-key");
    }

    /**
     * The config with its zone lower-cased: Spring's zone preference compares zones ignoring
     * case, polylb exactly, and the instances' zones are lower-cased alike (InstanceSet).
     */
    static String lowerCaseZone(String config) {
        String[] pairs = config.split("&", -1);
        for (int i = 0; i < pairs.length; i++) {
            int eq = pairs[i].indexOf('=');
            if (eq > 0 && pairs[i].substring(0, eq).trim().equals("zone")) {
                pairs[i] = pairs[i].substring(0, eq + 1) + pairs[i].substring(eq + 1).toLowerCase(Locale.ROOT);
            }
        }
        return String.join("&", pairs);
    }

    /** An instance's zone as polylb compares it; null for none. */
    static String zoneKey(String zone) {
        return zone == null || zone.isEmpty() ? null : zone.toLowerCase(Locale.ROOT);
    }

    private static String get(Environment env, String serviceId, String key, String fallback) {
        String own = own(env, serviceId, key);
        return own != null ? own : env.getProperty(PREFIX + "polylb." + key, fallback);
    }

    private static String own(Environment env, String serviceId, String key) {
        return serviceId == null ? null : env.getProperty(PREFIX + "clients." + serviceId + ".polylb." + key);
    }

    private static boolean hasKey(String config, String key) {
        for (String pair : config.split("&")) {
            int eq = pair.indexOf('=');
            // keys are trimmed, as polylb reads them: "zone =a" names a zone
            if (eq > 0 && pair.substring(0, eq).trim().equals(key)) {
                return true;
            }
        }
        return false;
    }
}
