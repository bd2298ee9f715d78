package io.polylb.dubbo;

import io.polylb.Balancer;
import io.polylb.Invoker;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.dubbo.common.URL;

/**
 * Everything one Dubbo service (serviceKey) needs: its provider set, stable ids for providers,
 * and the native balancers its methods use (normally one; methods whose URL parameters ask for
 * another strategy or ring size get their own).
 */
final class ServiceState {
    private final ConcurrentHashMap<String, Long> idsByIdentity = new ConcurrentHashMap<>();
    private final AtomicLong nextId = new AtomicLong();
    private final ConcurrentHashMap<String, NativeBalancer> balancersByConfig = new ConcurrentHashMap<>();
    final ConcurrentHashMap<String, MethodBinding> bindingsByMethod = new ConcurrentHashMap<>();

    volatile InvokerSet set = InvokerSet.EMPTY;

    /** A method's resolved configuration; valid while the list's first provider URL is {@code configUrl}. */
    static final class MethodBinding {
        final URL configUrl;
        final NativeBalancer balancer;
        final int methodId;
        /** hash.arguments for hashing strategies, else null. */
        final int[] hashArguments;
        final boolean adaptive;

        MethodBinding(URL configUrl, NativeBalancer balancer, int methodId, int[] hashArguments, boolean adaptive) {
            this.configUrl = configUrl;
            this.balancer = balancer;
            this.methodId = methodId;
            this.hashArguments = hashArguments;
            this.adaptive = adaptive;
        }
    }

    /** One polylb Balancer, kept in step with the service's provider set. */
    static final class NativeBalancer {
        final Balancer balancer;
        /**
         * Dubbo's random ignores every weight when the first provider declares neither weight nor
         * timestamp; such a balancer is registered with weight 100 everywhere.
         */
        private final boolean uniformWeights;
        private final ConcurrentHashMap<String, Integer> methodIds = new ConcurrentHashMap<>();
        volatile InvokerSet applied = InvokerSet.EMPTY;

        NativeBalancer(String config, boolean uniformWeights) {
            this.balancer = new Balancer(config);
            this.uniformWeights = uniformWeights;
        }

        int methodId(String name) {
            Integer id = methodIds.get(name);
            if (id == null) {
                id = methodIds.computeIfAbsent(name, balancer::method);
            }
            return id;
        }

        /** Registers {@code set} unless this balancer already has it or a newer one. */
        void sync(InvokerSet set) {
            if (applied.generation >= set.generation) {
                return;
            }
            synchronized (this) {
                if (applied.generation >= set.generation) {
                    return;
                }
                List<Invoker> invokers = new ArrayList<>(set.size());
                for (int i = 0; i < set.size(); i++) {
                    DubboUrls.ProviderParams p = set.params[i];
                    String address = DubboUrls.address(set.invokers[i]);
                    invokers.add(uniformWeights
                            ? new Invoker(set.ids[i], address, DubboUrls.DEFAULT_WEIGHT, 0, 0, p.zone())
                            : new Invoker(set.ids[i], address, p.weight(), p.startTimeMs(), p.warmupMs(), p.zone()));
                }
                balancer.update(invokers);
                applied = set;
            }
        }
    }

    NativeBalancer balancerFor(String config, boolean uniformWeights) {
        String key = uniformWeights ? config + "#uniform-weights" : config;
        NativeBalancer nb = balancersByConfig.get(key);
        if (nb == null) {
            nb = balancersByConfig.computeIfAbsent(key, k -> new NativeBalancer(config, uniformWeights));
        }
        return nb;
    }

    /**
     * Makes the set cover {@code list}: its providers in its order, followed by the previous
     * members that are not in it and still available (routers hand out subsets). A provider the
     * registry removed is destroyed, hence unavailable, and dropped here; one that came back as a
     * new Invoker object (same identity, e.g. changed parameters) replaces its old object.
     */
    synchronized InvokerSet cover(List<? extends org.apache.dubbo.rpc.Invoker<?>> list) {
        InvokerSet old = set;
        List<org.apache.dubbo.rpc.Invoker<?>> members = new ArrayList<>(list.size() + old.size());
        Set<org.apache.dubbo.rpc.Invoker<?>> inList = java.util.Collections.newSetFromMap(
                new java.util.IdentityHashMap<>());
        Set<String> identities = new HashSet<>();
        for (org.apache.dubbo.rpc.Invoker<?> invoker : list) {
            if (inList.add(invoker)) {
                members.add(invoker);
                identities.add(invoker.getUrl().toIdentityString());
            }
        }
        for (org.apache.dubbo.rpc.Invoker<?> invoker : old.invokers) {
            if (!inList.contains(invoker) && invoker.isAvailable()
                    && !identities.contains(invoker.getUrl().toIdentityString())) {
                members.add(invoker);
            }
        }
        return replace(old, members);
    }

    /** Drops members that are not in {@code list} and no longer available (destroyed). */
    InvokerSet prune(List<? extends org.apache.dubbo.rpc.Invoker<?>> list) {
        InvokerSet old = set;
        Set<org.apache.dubbo.rpc.Invoker<?>> inList = java.util.Collections.newSetFromMap(
                new java.util.IdentityHashMap<>());
        inList.addAll(list);
        boolean anyGone = false;
        for (org.apache.dubbo.rpc.Invoker<?> invoker : old.invokers) {
            if (!inList.contains(invoker) && !invoker.isAvailable()) {
                anyGone = true;
                break;
            }
        }
        if (!anyGone) {
            return old;
        }
        synchronized (this) {
            old = set;
            List<org.apache.dubbo.rpc.Invoker<?>> members = new ArrayList<>(old.size());
            for (org.apache.dubbo.rpc.Invoker<?> invoker : old.invokers) {
                if (inList.contains(invoker) || invoker.isAvailable()) {
                    members.add(invoker);
                }
            }
            return members.size() == old.size() ? old : replace(old, members);
        }
    }

    private InvokerSet replace(InvokerSet old, List<org.apache.dubbo.rpc.Invoker<?>> members) {
        int n = members.size();
        org.apache.dubbo.rpc.Invoker<?>[] invokers = members.toArray(new org.apache.dubbo.rpc.Invoker<?>[0]);
        long[] ids = new long[n];
        DubboUrls.ProviderParams[] params = new DubboUrls.ProviderParams[n];
        Set<Long> used = new HashSet<>();
        for (int i = 0; i < n; i++) {
            ids[i] = stableId(invokers[i], used);
            params[i] = DubboUrls.providerParams(invokers[i]);
        }
        InvokerSet next = new InvokerSet(old.generation + 1, invokers, ids, params);
        set = next;
        return next;
    }

    /**
     * Ids survive set changes (so polylb keeps round-robin positions, in-flight counts and
     * latency history): one id per provider identity (protocol://host:port/path). Two invokers
     * with the same identity in one set get distinct ids.
     */
    private long stableId(org.apache.dubbo.rpc.Invoker<?> invoker, Set<Long> used) {
        String identity = invoker.getUrl().toIdentityString();
        for (int dup = 0; ; dup++) {
            String key = dup == 0 ? identity : identity + "#" + dup;
            long id = idsByIdentity.computeIfAbsent(key, k -> nextId.incrementAndGet());
            if (used.add(id)) {
                return id;
            }
        }
    }

    /** Stats JSON of each native balancer of this service (diagnostics and tests). */
    List<String> statsJson() {
        List<String> out = new ArrayList<>();
        for (NativeBalancer nb : balancersByConfig.values()) {
            out.add(nb.balancer.statsJson());
        }
        return out;
    }
}
