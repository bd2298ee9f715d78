package io.polylb.dubbo;

import static java.nio.charset.StandardCharsets.UTF_8;

import java.util.regex.Pattern;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.cluster.ClusterInvoker;
import org.apache.dubbo.rpc.support.RpcUtils;

/**
 * The only Dubbo logic on the Java side: reading provider URLs the way Dubbo's
 * AbstractLoadBalance does, and building consistent-hash keys the way ConsistentHashLoadBalance
 * does. Everything that decides where a call goes lives in polylb.
 */
final class DubboUrls {
    static final String WEIGHT = "weight";
    static final String TIMESTAMP = "timestamp";
    static final String WARMUP = "warmup";
    static final String ZONE = "zone";
    static final String HASH_NODES = "hash.nodes";
    static final String HASH_ARGUMENTS = "hash.arguments";
    static final String TIMEOUT = "timeout";
    static final int DEFAULT_WEIGHT = 100;
    static final int DEFAULT_HASH_NODES = 160;
    static final int DEFAULT_TIMEOUT_MS = 1000;
    /** Dubbo's CommonConstants.COMMA_SPLIT_PATTERN, so hash.arguments splits identically. */
    static final Pattern COMMA_SPLIT = Pattern.compile("\\s*[,]+\\s*");
    static final String REGISTRY_SERVICE = "org.apache.dubbo.registry.RegistryService";

    private DubboUrls() {}

    /** What polylb needs to know about one provider, read once per set change. */
    record ProviderParams(int weight, long startTimeMs, int warmupMs, String zone) {}

    /** Dubbo's getWeight inputs at the service level (what calls of a method without overrides see). */
    static ProviderParams providerParams(Invoker<?> invoker) {
        return providerParams(invoker, null);
    }

    /**
     * Dubbo's getWeight inputs for calls of {@code methodName} (null: the service level): the
     * weight is {@code <methodName>.weight}, falling back to {@code weight}, read from the registry
     * URL of a cluster invoker as Dubbo does; the multi-registry case keeps Dubbo's service-level
     * rule. The warm-up arithmetic itself is done by polylb at select time.
     */
    static ProviderParams providerParams(Invoker<?> invoker, String methodName) {
        URL url = invoker.getUrl();
        URL weightUrl = url;
        if (invoker instanceof ClusterInvoker) {
            URL registryUrl = ((ClusterInvoker<?>) invoker).getRegistryUrl();
            if (registryUrl != null) {
                weightUrl = registryUrl;
            }
        }
        String zone = url.getParameter(ZONE);
        if (REGISTRY_SERVICE.equals(weightUrl.getServiceInterface())) {
            // Multi-registry: the registry's weight, no warm-up (as Dubbo).
            int weight = Math.max(weightUrl.getParameter(WEIGHT, DEFAULT_WEIGHT), 0);
            return new ProviderParams(weight, 0, 0, zone);
        }
        int weight = methodName == null
                ? weightUrl.getParameter(WEIGHT, DEFAULT_WEIGHT)
                : weightUrl.getMethodParameter(methodName, WEIGHT, DEFAULT_WEIGHT);
        if (weight <= 0) {
            // Dubbo applies warm-up only to positive weights and clamps negatives to 0.
            return new ProviderParams(0, 0, 0, zone);
        }
        long timestamp = url.getParameter(TIMESTAMP, 0L);
        String warmupText = url.getParameter(WARMUP);
        int warmupMs;
        if (warmupText == null || warmupText.isEmpty()) {
            warmupMs = -1; // polylb's default, which is Dubbo's 600000
        } else {
            // Dubbo: warmup <= 0 never warms up; polylb reads a negative warm-up as "default",
            // so pass 0.
            warmupMs = Math.max(url.getParameter(WARMUP, 0), 0);
        }
        return new ProviderParams(weight, Math.max(timestamp, 0), warmupMs, zone);
    }

    /**
     * Dubbo's RandomLoadBalance.needWeightLoadBalance, applied to the first provider: false means
     * Dubbo's random ignores every weight (a quirk polylb's Dubbo adapter reproduces).
     */
    static boolean declaresWeight(Invoker<?> first, String methodName) {
        URL url = first.getUrl();
        // The weight is read where providerParams (and Dubbo's getWeight) read it: from a cluster
        // invoker's registry URL; the timestamp from the invoker's own URL.
        URL weightUrl = url;
        if (first instanceof ClusterInvoker) {
            URL registryUrl = ((ClusterInvoker<?>) first).getRegistryUrl();
            if (registryUrl != null) {
                weightUrl = registryUrl;
            }
        }
        if (REGISTRY_SERVICE.equals(weightUrl.getServiceInterface())) {
            return notEmpty(weightUrl.getParameter(WEIGHT));
        }
        return notEmpty(weightUrl.getMethodParameter(methodName, WEIGHT)) || notEmpty(url.getParameter(TIMESTAMP));
    }

    /** The ring address Dubbo's ConsistentHashLoadBalance uses: host:port. */
    static String address(Invoker<?> invoker) {
        return invoker.getUrl().getAddress();
    }

    /** Parses hash.arguments exactly as ConsistentHashSelector does (a bad value throws, as there). */
    static int[] hashArguments(URL url, String methodName) {
        String[] index = COMMA_SPLIT.split(url.getMethodParameter(methodName, HASH_ARGUMENTS, "0"));
        int[] argumentIndex = new int[index.length];
        for (int i = 0; i < index.length; i++) {
            argumentIndex[i] = Integer.parseInt(index[i]);
        }
        return argumentIndex;
    }

    /**
     * Dubbo's consistent-hash key: String.valueOf of the arguments at the configured indexes,
     * concatenated without separator (out-of-range indexes skipped, null or a toString() that
     * returns null as "null"), with generic {@code $invoke} calls unwrapped; the balancer hashes
     * its UTF-8 bytes.
     */
    static String hashKey(Invocation invocation, int[] argumentIndex) {
        Object[] args = RpcUtils.getArguments(invocation);
        if (args == null || args.length == 0) {
            return "";
        }
        if (argumentIndex.length == 1) {
            int i = argumentIndex[0];
            if (i < 0 || i >= args.length) {
                return "";
            }
            // StringBuilder.append's text: "null" also for an argument whose toString() is null
            // (String.valueOf passes that null on).
            String text = String.valueOf(args[i]);
            return hashable(text == null ? "null" : text);
        }
        StringBuilder key = new StringBuilder();
        for (int i : argumentIndex) {
            if (i >= 0 && i < args.length) {
                key.append(args[i]);
            }
        }
        return hashable(key.toString());
    }

    /**
     * {@code key} with the UTF-8 form Dubbo hashes: {@code String.getBytes(UTF_8)} writes '?' for a
     * lone surrogate (e.g. an emoji cut in half), where polylb's API refuses such text. The key
     * itself, without a copy, when it holds no surrogate (the common case).
     */
    static String hashable(String key) {
        for (int i = 0, n = key.length(); i < n; i++) {
            if (Character.isSurrogate(key.charAt(i))) {
                return new String(key.getBytes(UTF_8), UTF_8);
            }
        }
        return key;
    }

    static boolean notEmpty(String s) {
        return s != null && !s.isEmpty();
    }

    /**
     * Dubbo's provider metrics attachment ({@code curTime:<ms>,load:<x>}), parsed as Dubbo's
     * AdaptiveLoadBalanceFilter and AdaptiveMetrics parse it: pairs split on commas then ':',
     * values that are not plain digits (plus one dot for load) count as 0.
     *
     * @return the metrics, or null when there is nothing usable (Dubbo drops the report when a
     *     value does not parse)
     */
    static ProviderMetrics parseAdaptiveAttachment(String attachment) {
        if (attachment == null || attachment.isEmpty()) {
            return null;
        }
        String[] parts = COMMA_SPLIT.split(attachment);
        if (parts.length == 0) {
            return null;
        }
        String curTime = null;
        String load = null;
        for (String part : parts) {
            String[] kv = part.split(":");
            if (kv.length != 2) {
                continue;
            }
            if ("curTime".equals(kv[0])) {
                curTime = kv[1];
            } else if ("load".equals(kv[0])) {
                load = kv[1];
            }
        }
        try {
            long providerTime = isNumeric(curTime, false) ? Long.parseLong(curTime) : 0;
            double cpuLoad = isNumeric(load, true) ? Double.parseDouble(load) : 0;
            return new ProviderMetrics(providerTime, cpuLoad);
        } catch (NumberFormatException e) {
            return null;
        }
    }

    record ProviderMetrics(long providerTimeMs, double load) {}

    /** Dubbo's StringUtils.isNumeric(str, allowDot). */
    static boolean isNumeric(String str, boolean allowDot) {
        if (str == null || str.isEmpty()) {
            return false;
        }
        boolean hasDot = false;
        for (int i = 0; i < str.length(); i++) {
            char c = str.charAt(i);
            if (c == '.') {
                if (hasDot || !allowDot) {
                    return false;
                }
                hasDot = true;
            } else if (!Character.isDigit(c)) {
                return false;
            }
        }
        return true;
    }
}
