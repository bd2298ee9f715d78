package io.polylb.dubbo;

import io.polylb.Balancer;
import io.polylb.Invoker;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.cluster.router.state.BitList;

/**
 * Everything one Dubbo service (serviceKey) needs: its provider set, stable ids for providers,
 * and the native balancers its methods use (normally one; methods whose URL parameters ask for
 * another strategy or ring size get their own, and so does a method whose providers declare
 * {@code <method>.weight}, registered with that method's weights).
 */
final class ServiceState {
    private final ConcurrentHashMap<String, Long> idsByIdentity = new ConcurrentHashMap<>();
    /**
     * When each identity of {@link #idsByIdentity} that no member holds left the set ({@link
     * #clock} nanos); guarded by this. One that comes back within {@link #DEPARTED_ID_RETENTION_NANOS}
     * gets its id back, and with it its round-robin position (Dubbo's roundrobin keeps a departed
     * provider's, keyed by its identity, until a select finds it 60 s old); later ones are
     * forgotten, so that providers that come and go (a pod gets a new address on each restart)
     * do not add up for as long as the service is in use.
     */
    private final HashMap<String, Long> departedAt = new HashMap<>();
    /** How long an identity that left the set keeps its id (ten times Dubbo's 60-s recycling). */
    static final long DEPARTED_ID_RETENTION_NANOS = TimeUnit.MINUTES.toNanos(10);
    /** The clock of {@link #departedAt} (tests move it). */
    volatile LongSupplier clock = System::nanoTime;
    private final AtomicLong nextId = new AtomicLong();
    private final ConcurrentHashMap<String, NativeBalancer> balancersByConfig = new ConcurrentHashMap<>();
    final ConcurrentHashMap<String, MethodBinding> bindingsByMethod = new ConcurrentHashMap<>();

    volatile InvokerSet set = InvokerSet.EMPTY;

    /**
     * Set by every select, cleared by each sweep: a state is freed only after a whole sweep
     * period without a select (see {@link PolylbLoadBalance#sweep}). A new state starts used,
     * so that it outlives the next sweep even if the select that made it has not set it yet.
     */
    volatile boolean used = true;
    /** Set before the balancers are closed: a select that then meets a closed one starts over. */
    volatile boolean retired;

    /**
     * How a Dubbo strategy's pick depends on the order of the call's list beyond chance: polylb
     * scans in set order (its candidates are a membership filter), so where the order matters the
     * set takes the list's order first (see {@link #reorder}).
     */
    enum ListOrder {
        /** Not at all, or only through random draws. */
        IGNORED,
        /** Ties go to the earliest provider in the list (Dubbo's roundrobin). */
        BREAKS_TIES,
        /**
         * A ring point placed by two providers at one host:port (e.g. dubbo:// and tri:// on one
         * port) goes to the later one in the list (Dubbo's consistenthash); without such a pair
         * the order changes nothing, and following it would only rebuild the ring.
         */
        RESOLVES_SHARED_ADDRESSES;

        boolean mattersFor(InvokerSet set) {
            return this == BREAKS_TIES || (this == RESOLVES_SHARED_ADDRESSES && set.sharesAddresses);
        }
    }

    /** Reorders a state may make at once, and per second once they are spent (see {@link #mayReorder}). */
    static final int REORDER_BURST = 32;
    static final double REORDERS_PER_SECOND = 4;
    private double reorderTokens = REORDER_BURST;
    private long reorderTokensAtNanos = System.nanoTime();

    /**
     * Whether the set may take a call's list order now (and if so, one reorder is counted).
     * Lists that keep alternating between two orders (two references of one service whose
     * directories order the providers differently) would otherwise rebuild the set, and a ring or
     * a round-robin period with it, on every call: past a burst of {@value #REORDER_BURST}, at
     * most {@value #REORDERS_PER_SECOND} reorders a second; calls in between are answered in the
     * set's order (their ties, or a shared address's points, may then go as the set's order says).
     */
    synchronized boolean mayReorder() {
        long now = System.nanoTime();
        reorderTokens = Math.min(REORDER_BURST,
                reorderTokens + (now - reorderTokensAtNanos) * (REORDERS_PER_SECOND / 1e9));
        reorderTokensAtNanos = now;
        if (reorderTokens < 1) {
            return false;
        }
        reorderTokens -= 1;
        return true;
    }

    /**
     * A method's resolved configuration; valid while the list's first provider URL is
     * {@code configUrl}. Which native balancer serves the method can also depend on the provider
     * set (method-level weights), so that part is a {@link Target} checked against the set.
     */
    static final class MethodBinding {
        final URL configUrl;
        /**
         * The last other URL object seen equal to {@code configUrl}: a second reference to the
         * service holds its own objects of the same providers, and calls through the two take
         * turns. Compared by identity first, so equality is read once per change of object.
         */
        volatile URL equalConfigUrl;
        final String methodName;
        final String config;
        /** hash.arguments for hashing strategies, else null. */
        final int[] hashArguments;
        final boolean adaptive;
        /** A provider listed k times among the candidates weighs k times (Dubbo's random, leastactive, shortestresponse). */
        final boolean countsDuplicates;
        /** How Dubbo's pick depends on the order of the call's list, which the set must then follow. */
        final ListOrder listOrder;
        /** The service's balancer for this configuration, shared by methods without own weights. */
        private final NativeBalancer shared;
        private final int sharedMethodId;
        private volatile Target target;

        /**
         * @param methodWeightsApply false when weights cannot matter (random ignoring weights as
         *     Dubbo's quirk asks, consistenthash's ring): then the target never depends on the set
         */
        MethodBinding(URL configUrl, String methodName, String config, NativeBalancer shared, int[] hashArguments,
                boolean adaptive, boolean methodWeightsApply, boolean countsDuplicates, ListOrder listOrder) {
            this.countsDuplicates = countsDuplicates;
            this.listOrder = listOrder;
            this.configUrl = configUrl;
            this.methodName = methodName;
            this.config = config;
            this.shared = shared;
            this.sharedMethodId = shared.methodId(methodName);
            this.hashArguments = hashArguments;
            this.adaptive = adaptive;
            // Never equal to a set a call sees (those have generation >= 1): resolved on first use.
            this.target = methodWeightsApply
                    ? new Target(shared, sharedMethodId, InvokerSet.EMPTY.generation)
                    : new Target(shared, sharedMethodId, Target.EVERY_SET);
        }

        /**
         * The balancer and method id for calls made against {@code set}. One volatile read and a
         * compare per call; the provider URLs are read (once per method) only when the set changed.
         */
        Target target(ServiceState state, InvokerSet set) {
            Target t = target;
            if (t.generation == Target.EVERY_SET || t.generation == set.generation) {
                return t;
            }
            return resolve(state, set);
        }

        private Target resolve(ServiceState state, InvokerSet set) {
            // A method that once needed its own weights keeps its balancer (sticky): its round-robin
            // positions and in-flight counts stay in one place when an override disappears and
            // comes back, and that balancer's weights follow the set (service level when no
            // provider overrides any more), as Dubbo's per-method state does.
            NativeBalancer own = state.ownWeightsBalancer(config, methodName, false);
            if (own == null && set.methodWeightsDiffer(methodName)) {
                own = state.ownWeightsBalancer(config, methodName, true);
            }
            Target t = own != null
                    ? new Target(own, own.methodId(methodName), Target.EVERY_SET)
                    : new Target(shared, sharedMethodId, set.generation);
            target = t;
            return t;
        }
    }

    /** Where one method's calls go: a native balancer and the method's id in it. */
    static final class Target {
        final NativeBalancer balancer;
        final int methodId;
        /** {@link #generation} of a choice that holds for every set. */
        static final long EVERY_SET = -1;
        /**
         * The generation of the set this choice was made for ({@link #EVERY_SET}: every set). The
         * generation, not the set: a method no longer called (a generic call's name, a method
         * called once at start-up) would otherwise keep the set of its last call reachable, with
         * its Invoker objects, long destroyed by registry refreshes, their aliases and the
         * directory's list, for as long as the service is in use. A state's sets are told apart
         * by generation (each replacement takes the next one, under the state's lock).
         */
        final long generation;

        Target(NativeBalancer balancer, int methodId, long generation) {
            this.balancer = balancer;
            this.methodId = methodId;
            this.generation = generation;
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
        /**
         * Non-null for a balancer serving one method whose providers declare
         * {@code <method>.weight}: its invokers carry that method's weights (Dubbo's getWeight for
         * the method). Null: the service-level weights.
         */
        private final String weightMethod;
        /** The configuration it was made for (its key in {@link #balancersByConfig} starts with it). */
        final String config;
        /**
         * A binding took it since the sweep before the last (see {@link #retireUnboundBalancers}):
         * set under the state's lock, cleared by sweeps while no binding holds its configuration.
         */
        volatile boolean bound = true;
        private final ConcurrentHashMap<String, Integer> methodIds = new ConcurrentHashMap<>();
        volatile InvokerSet applied = InvokerSet.EMPTY;
        /** Native updates made so far (diagnostics and tests); written under this object's lock. */
        volatile long updates;

        NativeBalancer(String config, boolean uniformWeights, String weightMethod) {
            this.balancer = new Balancer(config);
            this.config = config;
            this.uniformWeights = uniformWeights;
            this.weightMethod = weightMethod;
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
                DubboUrls.ProviderParams[] params = weightMethod == null ? set.params : set.paramsFor(weightMethod);
                List<Invoker> invokers = new ArrayList<>(set.size());
                for (int i = 0; i < set.size(); i++) {
                    DubboUrls.ProviderParams p = params[i];
                    String address = DubboUrls.address(set.invokers[i]);
                    invokers.add(uniformWeights
                            ? new Invoker(set.ids[i], address, DubboUrls.DEFAULT_WEIGHT, 0, 0, p.zone())
                            : new Invoker(set.ids[i], address, p.weight(), p.startTimeMs(), p.warmupMs(), p.zone()));
                }
                balancer.update(invokers);
                applied = set;
                updates++;
            }
        }
    }

    NativeBalancer balancerFor(String config, boolean uniformWeights) {
        String key = uniformWeights ? config + "#uniform-weights" : config;
        NativeBalancer nb = balancersByConfig.get(key);
        if (nb == null) {
            nb = balancersByConfig.computeIfAbsent(key, k -> new NativeBalancer(config, uniformWeights, null));
        }
        return nb;
    }

    /**
     * The balancer of one method with its own weights ({@code <method>.weight}), for a
     * configuration: the existing one, else a new one when {@code create}, else null.
     */
    NativeBalancer ownWeightsBalancer(String config, String methodName, boolean create) {
        String key = config + "#weights:" + methodName;
        NativeBalancer nb = balancersByConfig.get(key);
        if (nb == null && create) {
            nb = balancersByConfig.computeIfAbsent(key, k -> new NativeBalancer(config, false, methodName));
        }
        return nb;
    }

    /**
     * Makes the set know every object of {@code list}: its providers in its order, followed by
     * the previous members that are not in it and still available (routers hand out subsets).
     * A provider the registry removed is destroyed, hence unavailable, and dropped here.
     *
     * <p>One member per provider identity ({@code protocol://host:port/path}) seen through
     * different Invoker objects (a registry refresh replaces objects while calls still hold the
     * previous list), the newest: an object not seen before replaces the member of its identity
     * when it is available (it comes from a newer list; its parameters, e.g. a new weight, are
     * registered); the replaced member stays an alias, so calls still holding it match without a
     * rebuild. An unavailable (destroyed) object not seen before becomes an alias of the member;
     * one whose provider has no member (removed from the registry) a dead alias, never picked,
     * unless the list holds nothing else. A live alias of a destroyed member replaces it. Only
     * when a list holds two live objects of one identity are both members (with distinct ids).
     * When nothing but aliases changes, the set stays (no new generation, no native update).
     *
     * <p>"Newer" means "seen later": should a call with the older objects, still alive, come
     * first after the newer ones, the older ones are registered until they are destroyed; then
     * a call with the live ones registers those (two rebuilds instead of one).
     */
    synchronized InvokerSet cover(List<? extends org.apache.dubbo.rpc.Invoker<?>> list) {
        InvokerSet old = set;
        Map<org.apache.dubbo.rpc.Invoker<?>, Boolean> inList = new IdentityHashMap<>();
        for (org.apache.dubbo.rpc.Invoker<?> invoker : list) {
            inList.put(invoker, Boolean.TRUE);
        }
        // First member per identity (later ones are duplicates a list held at once).
        Map<String, org.apache.dubbo.rpc.Invoker<?>> memberByIdentity = new HashMap<>();
        for (org.apache.dubbo.rpc.Invoker<?> member : old.invokers) {
            memberByIdentity.putIfAbsent(member.getUrl().toIdentityString(), member);
        }

        // Pass 1: which members a newer (or live) object of the list replaces.
        Map<org.apache.dubbo.rpc.Invoker<?>, org.apache.dubbo.rpc.Invoker<?>> replacedBy = new IdentityHashMap<>();
        for (org.apache.dubbo.rpc.Invoker<?> invoker : list) {
            if (old.isMember(invoker) || replacedBy.containsValue(invoker) || !invoker.isAvailable()) {
                continue;
            }
            int p = old.positionOf(invoker);
            org.apache.dubbo.rpc.Invoker<?> member = p >= 0
                    ? old.invokers[p]
                    : memberByIdentity.get(invoker.getUrl().toIdentityString());
            if (member == null || inList.containsKey(member) || replacedBy.containsKey(member)) {
                continue;
            }
            // A known alias takes over only from a destroyed member; a new object always does.
            if (p < 0 || !member.isAvailable()) {
                replacedBy.put(member, invoker);
            }
        }

        // Whether the list holds something else than destroyed objects of departed providers.
        boolean anyLive = false;
        for (org.apache.dubbo.rpc.Invoker<?> invoker : list) {
            if (invoker.isAvailable() || old.positionOf(invoker) >= 0
                    || memberByIdentity.containsKey(invoker.getUrl().toIdentityString())) {
                anyLive = true;
                break;
            }
        }

        // Pass 2: the members, in the list's order, and the aliases of this call's objects.
        List<org.apache.dubbo.rpc.Invoker<?>> members = new ArrayList<>(list.size() + old.size());
        Map<org.apache.dubbo.rpc.Invoker<?>, Boolean> taken = new IdentityHashMap<>();
        IdentityHashMap<org.apache.dubbo.rpc.Invoker<?>, org.apache.dubbo.rpc.Invoker<?>> aliases =
                new IdentityHashMap<>();
        for (org.apache.dubbo.rpc.Invoker<?> invoker : list) {
            org.apache.dubbo.rpc.Invoker<?> target;
            int p = old.positionOf(invoker);
            if (p >= 0) {
                target = resolve(replacedBy, old.invokers[p]);
            } else {
                org.apache.dubbo.rpc.Invoker<?> member = memberByIdentity.get(invoker.getUrl().toIdentityString());
                if (member != null && replacedBy.get(member) == invoker) {
                    target = invoker;
                } else if (member != null && !invoker.isAvailable()) {
                    target = resolve(replacedBy, member); // the live object is picked for it
                } else if (member == null && anyLive && !invoker.isAvailable()) {
                    // Destroyed, and its provider is gone: never a candidate (a dead alias).
                    aliases.put(invoker, null);
                    continue;
                } else {
                    target = invoker; // a new provider, or a second live object of one in this list
                }
            }
            if (target != invoker) {
                aliases.put(invoker, target);
            }
            if (taken.put(target, Boolean.TRUE) == null) {
                members.add(target);
            }
        }
        for (org.apache.dubbo.rpc.Invoker<?> member : old.invokers) {
            if (!taken.containsKey(member) && !replacedBy.containsKey(member) && member.isAvailable()) {
                taken.put(member, Boolean.TRUE);
                members.add(member);
            }
        }

        boolean sameMembers = replacedBy.isEmpty() && members.size() == old.size();
        for (int i = 0; sameMembers && i < members.size(); i++) {
            sameMembers = old.isMember(members.get(i));
        }
        if (sameMembers) {
            // Only new aliases: the registered set (and the native balancers) stay as they are.
            if (!aliases.isEmpty()) {
                old.addAliases(aliases);
            }
            return old;
        }
        // Carried over: replaced members that are still available (calls may hold them), and
        // earlier aliases whose provider is still a member, unless destroyed (a call still
        // holding one re-adds it) or past the limit (a caller handing out new objects per call).
        replacedBy.forEach((member, replacement) -> {
            if (member.isAvailable() && !taken.containsKey(member)) {
                aliases.putIfAbsent(member, replacement);
            }
        });
        int limit = 4 * members.size() + 16;
        for (Map.Entry<org.apache.dubbo.rpc.Invoker<?>, org.apache.dubbo.rpc.Invoker<?>> e
                : old.aliasMembers().entrySet()) {
            if (aliases.size() >= limit) {
                break;
            }
            org.apache.dubbo.rpc.Invoker<?> alias = e.getKey();
            org.apache.dubbo.rpc.Invoker<?> target = resolve(replacedBy, e.getValue());
            if (alias.isAvailable() && taken.containsKey(target) && !taken.containsKey(alias)) {
                aliases.putIfAbsent(alias, target);
            }
        }
        return replace(old, members, aliases);
    }

    /**
     * The set in the order of {@code list} (members only, no repeats): its members first, in its
     * order, then the other members in theirs; same objects, ids and parameters. For a router's
     * BitList the order is its origin's (the directory's list, which every subset routed from it
     * follows), then the list's own other elements. {@code expected} is the set the list was
     * matched against; if another replaced it meanwhile, that one is returned unchanged.
     */
    synchronized InvokerSet reorder(List<? extends org.apache.dubbo.rpc.Invoker<?>> list, InvokerSet expected) {
        InvokerSet old = set;
        if (old != expected) {
            return old;
        }
        int n = old.size();
        org.apache.dubbo.rpc.Invoker<?>[] invokers = new org.apache.dubbo.rpc.Invoker<?>[n];
        long[] ids = new long[n];
        DubboUrls.ProviderParams[] params = new DubboUrls.ProviderParams[n];
        boolean[] placed = new boolean[n];
        int k = 0;
        List<?> origin = list instanceof BitList ? ((BitList<?>) list).getOriginList() : List.of();
        for (List<?> order : List.of(origin, list)) {
            for (Object element : order) {
                int p = element instanceof org.apache.dubbo.rpc.Invoker
                        ? old.positionOf((org.apache.dubbo.rpc.Invoker<?>) element)
                        : -1;
                if (p >= 0 && !placed[p]) {
                    placed[p] = true;
                    invokers[k] = old.invokers[p];
                    ids[k] = old.ids[p];
                    params[k++] = old.params[p];
                }
            }
        }
        for (int p = 0; p < n; p++) {
            if (!placed[p]) {
                invokers[k] = old.invokers[p];
                ids[k] = old.ids[p];
                params[k++] = old.params[p];
            }
        }
        InvokerSet next = new InvokerSet(old.generation + 1, invokers, ids, params, old.aliasMembers());
        set = next;
        return next;
    }

    private static org.apache.dubbo.rpc.Invoker<?> resolve(
            Map<org.apache.dubbo.rpc.Invoker<?>, org.apache.dubbo.rpc.Invoker<?>> replacedBy,
            org.apache.dubbo.rpc.Invoker<?> member) {
        org.apache.dubbo.rpc.Invoker<?> replacement = replacedBy.get(member);
        return replacement == null ? member : replacement;
    }

    /**
     * Drops members that are no longer available (destroyed) and not in {@code list}, themselves or
     * through an alias.
     */
    InvokerSet prune(List<? extends org.apache.dubbo.rpc.Invoker<?>> list) {
        InvokerSet old = set;
        Set<org.apache.dubbo.rpc.Invoker<?>> inList = java.util.Collections.newSetFromMap(
                new java.util.IdentityHashMap<>());
        for (org.apache.dubbo.rpc.Invoker<?> invoker : list) {
            int p = old.positionOf(invoker);
            inList.add(p >= 0 ? old.invokers[p] : invoker);
        }
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
            if (set != old) {
                return set; // changed meanwhile: the caller matches again
            }
            List<org.apache.dubbo.rpc.Invoker<?>> members = new ArrayList<>(old.size());
            for (org.apache.dubbo.rpc.Invoker<?> invoker : old.invokers) {
                if (inList.contains(invoker) || invoker.isAvailable()) {
                    members.add(invoker);
                }
            }
            if (members.size() == old.size()) {
                return old;
            }
            IdentityHashMap<org.apache.dubbo.rpc.Invoker<?>, org.apache.dubbo.rpc.Invoker<?>> aliases =
                    new IdentityHashMap<>();
            old.aliasMembers().forEach((alias, member) -> {
                if (alias.isAvailable()) {
                    aliases.put(alias, member); // the constructor drops those of dropped members
                }
            });
            return replace(old, members, aliases);
        }
    }

    private InvokerSet replace(InvokerSet old, List<org.apache.dubbo.rpc.Invoker<?>> members,
            IdentityHashMap<org.apache.dubbo.rpc.Invoker<?>, org.apache.dubbo.rpc.Invoker<?>> aliases) {
        int n = members.size();
        org.apache.dubbo.rpc.Invoker<?>[] invokers = members.toArray(new org.apache.dubbo.rpc.Invoker<?>[0]);
        long[] ids = new long[n];
        DubboUrls.ProviderParams[] params = new DubboUrls.ProviderParams[n];
        Set<Long> used = new HashSet<>();
        Set<String> held = new HashSet<>();
        for (int i = 0; i < n; i++) {
            ids[i] = stableId(invokers[i], used, held);
            params[i] = DubboUrls.providerParams(invokers[i]);
        }
        forgetDeparted(held);
        InvokerSet next = new InvokerSet(old.generation + 1, invokers, ids, params, aliases);
        set = next;
        return next;
    }

    /**
     * Ids survive set changes (so polylb keeps round-robin positions, in-flight counts and
     * latency history): one id per provider identity (protocol://host:port/path), kept while it
     * is a member and for {@link #DEPARTED_ID_RETENTION_NANOS} after it leaves. Two invokers
     * with the same identity in one set get distinct ids.
     */
    private long stableId(org.apache.dubbo.rpc.Invoker<?> invoker, Set<Long> used, Set<String> held) {
        String identity = invoker.getUrl().toIdentityString();
        for (int dup = 0; ; dup++) {
            String key = dup == 0 ? identity : identity + "#" + dup;
            long id = idsByIdentity.computeIfAbsent(key, k -> nextId.incrementAndGet());
            if (used.add(id)) {
                held.add(key);
                return id;
            }
        }
    }

    /**
     * Forgets the ids of identities that no member holds ({@code held} are the members') once
     * they have been gone for {@link #DEPARTED_ID_RETENTION_NANOS}; caller holds this. Run on each
     * set change, so what is kept is the set plus what left within that time before the last
     * change, whatever the service's history.
     */
    private void forgetDeparted(Set<String> held) {
        long now = clock.getAsLong();
        for (Iterator<String> it = idsByIdentity.keySet().iterator(); it.hasNext(); ) {
            String key = it.next();
            if (held.contains(key)) {
                departedAt.remove(key);
                continue;
            }
            Long since = departedAt.putIfAbsent(key, now);
            if (since != null && now - since > DEPARTED_ID_RETENTION_NANOS) {
                it.remove();
                departedAt.remove(key);
            }
        }
    }

    /** Identities whose ids are kept: the members' and those that left recently (tests). */
    int knownIdentities() {
        return idsByIdentity.size();
    }

    /** The polylb id of the provider at {@code url} (its first, if a set held two), or -1. */
    long idOf(URL url) {
        Long id = idsByIdentity.get(url.toIdentityString());
        return id == null ? -1 : id;
    }

    /**
     * True while some Invoker object this state knows (a member or an alias) is available. A
     * reference's destroy destroys every invoker of its directory, after which none is.
     */
    boolean anyAvailable() {
        InvokerSet s = set;
        for (org.apache.dubbo.rpc.Invoker<?> invoker : s.invokers) {
            if (invoker.isAvailable()) {
                return true;
            }
        }
        for (org.apache.dubbo.rpc.Invoker<?> alias : s.aliasMembers().keySet()) {
            if (alias.isAvailable()) {
                return true;
            }
        }
        return false;
    }

    /**
     * Closes this state's balancers. Safe while calls are still in flight: a closed Balancer
     * never frees the memory a racing or later call reaches (its native struct goes with its
     * Cleaner, once unreachable); those calls' reports throw IllegalStateException, which the
     * filters ignore.
     */
    void retire() {
        retired = true;
        for (NativeBalancer nb : balancersByConfig.values()) {
            nb.balancer.close();
        }
    }

    /**
     * Closes the balancers of configurations that no method's binding holds any more and that
     * none took for a whole sweep period (they would keep a stale set, ring and counters for as
     * long as the service is in use: one per value a provider's URL ever gave {@code hash.nodes},
     * {@code timeout}, {@code polylb.config}, ...). A configuration that comes and goes (the first
     * provider alternating during a rolling change) is bound again within each period and kept.
     * Under this state's lock, as bindings are made: a binding never takes a balancer this closes.
     * A select still holding a binding made before starts over ({@link #balancersRetired}).
     *
     * @return how many balancers were closed
     */
    synchronized int retireUnboundBalancers() {
        Set<String> inUse = new HashSet<>();
        for (MethodBinding binding : bindingsByMethod.values()) {
            inUse.add(binding.config);
        }
        int closed = 0;
        for (Iterator<NativeBalancer> it = balancersByConfig.values().iterator(); it.hasNext(); ) {
            NativeBalancer nb = it.next();
            if (inUse.contains(nb.config)) {
                continue;
            }
            if (nb.bound) {
                nb.bound = false; // one more period
                continue;
            }
            it.remove();
            balancersRetired++;
            nb.balancer.close();
            closed++;
        }
        return closed;
    }

    /**
     * Balancers closed by {@link #retireUnboundBalancers} so far: a select that met a closed
     * balancer while this changed starts over with the method's current binding.
     */
    volatile int balancersRetired;

    /** Native updates made so far, summed over this service's balancers (tests). */
    long nativeUpdates() {
        long n = 0;
        for (NativeBalancer nb : balancersByConfig.values()) {
            n += nb.updates;
        }
        return n;
    }

    /** Stats JSON of each native balancer of this service (diagnostics and tests). */
    /**
     * A load report for the provider at {@code url}, to each balancer (reports are per provider,
     * and every balancer of the service weighs the same providers); false when the provider has
     * no id here.
     */
    boolean reportLoad(URL url, double qps, double eps, double utilization) {
        long id = idOf(url);
        if (id < 0) {
            return false;
        }
        boolean taken = false;
        for (NativeBalancer nb : balancersByConfig.values()) {
            try {
                nb.balancer.reportLoad(id, qps, eps, utilization);
                taken = true;
            } catch (IllegalStateException closed) {
                // Retired by a sweep meanwhile: its successor starts without reports.
            }
        }
        return taken;
    }

    List<String> statsJson() {
        List<String> out = new ArrayList<>();
        for (NativeBalancer nb : balancersByConfig.values()) {
            try {
                out.add(nb.balancer.statsJson());
            } catch (IllegalStateException closed) {
                // Retired by a sweep meanwhile: nothing left to show.
            }
        }
        return out;
    }
}
