package io.polylb.dubbo;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.apache.dubbo.common.constants.CommonConstants.DEFAULT_LOADBALANCE;
import static org.apache.dubbo.common.constants.CommonConstants.LOADBALANCE_KEY;

import io.polylb.Balancer;
import io.polylb.PolylbException;
import io.polylb.Status;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.resource.Disposable;
import org.apache.dubbo.common.threadpool.manager.FrameworkExecutorRepository;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.cluster.ClusterInvoker;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.AbstractLoadBalance;
import org.apache.dubbo.rpc.cluster.router.state.BitList;
import org.apache.dubbo.rpc.model.ApplicationModel;
import org.apache.dubbo.rpc.model.ScopeModelAware;
import org.apache.dubbo.rpc.model.ScopeModelUtil;
import org.apache.dubbo.rpc.support.RpcUtils;

/**
 * Dubbo {@code LoadBalance} backed by polylb; selected with {@code loadbalance="polylb"}, the
 * strategy coming from the URL parameter {@value #STRATEGY_KEY} (default {@code random}), or with
 * a per-strategy name such as {@code loadbalance="polylb-leastactive"} (the nested classes).
 *
 * <p>Per service (serviceKey) one provider set is registered with polylb and updated only when
 * Dubbo's list holds a provider polylb does not know, or drops a destroyed one; a routed subset
 * is passed as candidates. Feedback (latency, outcome, provider load) comes from
 * {@link PolylbInvokerFilter}; picks Dubbo discards are released by {@link PolylbClusterFilter}.
 *
 * <p>URL parameters read (method level first, from the first provider, as Dubbo does):
 * {@value #STRATEGY_KEY}, {@code hash.arguments} (hashing strategies: {@code consistenthash},
 * {@code boundedhash}, {@code maglev}, {@code rendezvous}), {@code hash.nodes} (those on Dubbo's ring:
 * {@code consistenthash}, {@code boundedhash}),
 * {@code timeout} (adaptive; unlike Dubbo, which reads it per candidate and lets a call's
 * {@code timeout} attachment override it, polylb has one timeout per balancer: see the README),
 * {@value #EXTRA_CONFIG_KEY} (extra polylb configuration, e.g.
 * {@code seed=42}); per provider: {@code weight} ({@code <method>.weight} first), {@code timestamp},
 * {@code warmup}, {@code zone}. A method whose providers declare {@code <method>.weight} gets a
 * native balancer registered with that method's weights; other methods share the service's.
 * {@code shortestresponse}'s window comes, as Dubbo's, from the application configuration
 * {@value #DUBBO_SLIDE_PERIOD_KEY} (default 30000 ms).
 */
public class PolylbLoadBalance extends AbstractLoadBalance implements Disposable, ScopeModelAware {
    /** This extension's name ({@code loadbalance="polylb"}), the prefix of every polylb extension's. */
    public static final String NAME = "polylb";
    /**
     * URL parameter: the strategy of {@code loadbalance="polylb"} (also
     * {@code <method>.polylb.strategy}; default {@code random}); the per-strategy extensions ignore it.
     */
    public static final String STRATEGY_KEY = "polylb.strategy";
    /**
     * URL parameter: more polylb configuration (e.g. {@code seed=42}), added to what the adapter
     * builds from Dubbo's keys (also {@code <method>.polylb.config}).
     */
    public static final String EXTRA_CONFIG_KEY = "polylb.config";
    static final String DEFAULT_STRATEGY = "random";
    /** Prefix of the key of a service's registry-level state (multi-registry selection). */
    public static final String REGISTRY_LEVEL_PREFIX = "registry-level:";
    static final String ADAPTIVE_ATTACHMENT = "lb_adaptive";
    /** What Dubbo's AdaptiveLoadBalance asks providers for. */
    static final String ADAPTIVE_ATTACHMENT_REQUEST = "mem,load";
    static final String DUBBO_SLIDE_PERIOD_KEY = "shortestResponseSlidePeriod";
    static final String SLIDE_PERIOD_KEY = "shortestresponse.slidePeriod";
    static final int DEFAULT_SLIDE_PERIOD_MS = 30_000;
    /** Application configuration: how often unused states of destroyed references are freed (ms). */
    public static final String SWEEP_PERIOD_KEY = "polylb.sweepPeriodMs";
    static final int DEFAULT_SWEEP_PERIOD_MS = 60_000;
    /** Strategies that place a call by a key built from its arguments ({@code hash.arguments}). */
    private static final Set<String> HASHING = Set.of("consistenthash", "boundedhash", "maglev", "rendezvous");
    /**
     * The hashing strategies on Dubbo's ring, which takes {@code hash.nodes}; {@code maglev}'s
     * lookup table has no virtual nodes (its size is {@code maglev.tableSize}, a polylb key), and
     * {@code rendezvous} has neither ring nor table.
     */
    private static final Set<String> RING = Set.of("consistenthash", "boundedhash");
    /** Dubbo's strategies whose pick weighs each element of the list (a repeated one more). */
    private static final Set<String> COUNTS_DUPLICATES = Set.of("random", "leastactive", "shortestresponse");
    /**
     * Method names a service balances each on its own; past them (a generic gateway forwarding
     * names its callers choose), new names are balanced together at the service level, as are
     * names the library cannot take (no UTF-8 form). A select never fails for a method name, as
     * Dubbo's never does, and the adapter's memory per service stays bounded (about 1 KB a name;
     * Dubbo keeps a map entry per name for as long as the process runs).
     */
    static final int MAX_METHODS_PER_SERVICE = 4096;
    /** The name the calls of methods past {@link #MAX_METHODS_PER_SERVICE} are balanced under. */
    static final String SERVICE_LEVEL = "";
    /** How Dubbo's pick of each strategy depends on the order of the call's list. */
    private static ServiceState.ListOrder listOrderOf(String strategy) {
        return switch (strategy) {
            case "roundrobin" -> ServiceState.ListOrder.BREAKS_TIES;
            case "consistenthash" -> ServiceState.ListOrder.RESOLVES_SHARED_ADDRESSES;
            default -> ServiceState.ListOrder.IGNORED;
        };
    }

    /**
     * {@code invoker instanceof ClusterInvoker}, by the invoker's class. Before JDK 23, HotSpot
     * caches only the instanceof checks against an interface that succeed; one that fails, as it
     * does for every provider of a single-registry reference, scans the class's supertypes on
     * every call: 17 ns of a 130-ns select + release on a 2-core AMD host, against 3 ns here.
     */
    private static final ClassValue<Boolean> IS_CLUSTER_INVOKER = new ClassValue<>() {
        @Override
        protected Boolean computeValue(Class<?> type) {
            return ClusterInvoker.class.isAssignableFrom(type);
        }
    };

    private static final ThreadLocal<long[]> CANDIDATES = ThreadLocal.withInitial(() -> new long[64]);

    private final String fixedStrategy;
    /**
     * shortestresponse's window: Dubbo's ShortestResponseLoadBalance reads the application
     * configuration {@value #DUBBO_SLIDE_PERIOD_KEY} (not a URL parameter), default 30 s.
     */
    private volatile int slidePeriodMs = DEFAULT_SLIDE_PERIOD_MS;
    private final ConcurrentHashMap<String, ServiceState> services = new ConcurrentHashMap<>();
    private volatile ScheduledFuture<?> sweeps;

    /** {@code loadbalance="polylb"}: the strategy comes from {@value #STRATEGY_KEY}. */
    public PolylbLoadBalance() {
        this(null);
    }

    /**
     * The adapter with a fixed strategy, as the per-strategy extensions (the nested classes) are.
     *
     * @param fixedStrategy the polylb strategy of every service; null: read from {@value #STRATEGY_KEY}
     */
    protected PolylbLoadBalance(String fixedStrategy) {
        this.fixedStrategy = fixedStrategy;
    }

    @Override
    public void setApplicationModel(ApplicationModel applicationModel) {
        scheduleSweeps(applicationModel);
        int ms;
        try {
            ms = DubboCompat.environment(applicationModel).getConfiguration()
                    .getInt(DUBBO_SLIDE_PERIOD_KEY, DEFAULT_SLIDE_PERIOD_MS);
        } catch (RuntimeException e) {
            ms = DEFAULT_SLIDE_PERIOD_MS; // not a number: Dubbo fails to create its balancer
        }
        // Any int, as Dubbo's (0 or less resets the window at nearly every pick; so does polylb).
        slidePeriodMs = ms;
    }

    @Override
    protected <T> Invoker<T> doSelect(List<Invoker<T>> invokers, URL url, Invocation invocation) {
        Invoker<T> first = invokers.get(0);
        String serviceKey = first.getUrl().getServiceKey();
        if (IS_CLUSTER_INVOKER.get(first.getClass())) {
            // Multi-registry: one cluster invoker per registry, each with the consumer's URL, so
            // the same serviceKey as the providers. Sharing their state would make every
            // provider list a subset of a mixed set (candidates on every call, bindings redone
            // whenever the first URL alternates).
            serviceKey = REGISTRY_LEVEL_PREFIX + serviceKey;
        }
        while (true) {
            ServiceState state = service(serviceKey);
            if (!state.used) {
                state.used = true; // read first: one plain load per call once set
            }
            int retirements = state.balancersRetired;
            try {
                return doSelect(invokers, first, invocation, state);
            } catch (IllegalStateException e) {
                // A sweep retired the state between our lookup and the native calls (it had gone
                // a whole period unused): the next lookup makes a fresh one. No bound on the
                // retries: a fresh state starts used, so retiring it again takes two more sweeps
                // (a period apart, a minute by default) during this one select. Or it closed the
                // balancer of a configuration that no binding held any more, which this select's
                // binding, made before, still did: the next try takes the current binding.
                if (!state.retired && state.balancersRetired == retirements) {
                    throw e;
                }
            }
        }
    }

    /**
     * @param first {@code invokers.get(0)}, read once: on the BitList that Dubbo's routers hand
     *     out, every get takes the list's lock and counts its bitmap
     */
    private <T> Invoker<T> doSelect(List<Invoker<T>> invokers, Invoker<T> first, Invocation invocation,
            ServiceState state) {
        URL firstUrl = first.getUrl();
        String methodName = RpcUtils.getMethodName(invocation);
        ServiceState.MethodBinding binding = binding(state, methodName, first);
        String key = binding.hashArguments == null ? null : DubboUrls.hashKey(invocation, binding.hashArguments);

        // Retries only happen when another thread changed the set between our steps. After three,
        // the attempts hold the service's lock (the set changes only under it), so a select never
        // fails for losing races, as Dubbo's balancers never fail one: there, at most one
        // attempt updates the set for this call's list and the next one picks.
        for (int attempt = 0; attempt < 6; attempt++) {
            Invoker<T> chosen;
            if (attempt < 3) {
                chosen = attempt(invokers, firstUrl, invocation, state, binding, key, attempt);
            } else {
                synchronized (state) {
                    chosen = attempt(invokers, firstUrl, invocation, state, binding, key, attempt);
                }
            }
            if (chosen != null) {
                return chosen;
            }
        }
        throw new RpcException("polylb: the provider list of " + firstUrl.getServiceKey()
                + " kept changing during select; giving up after 6 attempts");
    }

    /** One try of {@link #doSelect}: the pick, or null when the set changed meanwhile. */
    private <T> Invoker<T> attempt(List<Invoker<T>> invokers, URL firstUrl, Invocation invocation, ServiceState state,
            ServiceState.MethodBinding binding, String key, int attempt) {
        String methodName = binding.methodName;
        InvokerSet set = state.set;
        long[] candidates = null;
        int count = 0;
        // Set when the list holds other objects of members' providers (aliases): the pick is
        // then mapped back to the call's own object.
        boolean aliased = false;
        // The call's object per position when its list is known to be the whole set through
        // aliases (another reference's objects of the same providers).
        Invoker<?>[] aliasObjects = set.knownAliased(invokers);
        if (aliasObjects != null) {
            aliased = true;
        } else if (!set.knownEqual(invokers)) {
            candidates = scratch(invokers.size());
            int match = set.match(invokers, candidates, attempt == 0);
            if (match == InvokerSet.UNKNOWN_MEMBER) {
                state.cover(invokers);
                return null;
            }
            if (match != InvokerSet.EQUAL && (match & InvokerSet.ALIASED) != 0) {
                match &= ~InvokerSet.ALIASED;
                aliased = true;
                if (set.allInOrder(candidates, match)) {
                    match = InvokerSet.EQUAL; // every provider, in order: no candidates needed
                }
            }
            if (match == InvokerSet.EQUAL) {
                if (!aliased) {
                    set.rememberEqual(invokers);
                } else {
                    set.rememberAliased(invokers);
                }
                candidates = null;
            } else {
                if (set.subsetNeedsCheck(match)) {
                    if (state.prune(invokers) != set) {
                        return null; // a destroyed provider left; match against the smaller set
                    }
                }
                count = match;
                if (binding.listOrder.mattersFor(set) && !aliased && attempt < 3
                        && (count == set.size() || invokers instanceof BitList)
                        && set.outOfOrder(candidates, count) && state.mayReorder()) {
                    // The list meets its providers in another order than the set. Dubbo's round
                    // robin breaks ties, and its ring resolves colliding points, in the list's
                    // order; polylb scans in set order: the set takes the list's order (a router's
                    // BitList: its directory's, which every routed subset follows). Only for
                    // whole lists and routers' subsets, not for other subsets (a reselect's random
                    // draws), which could rebuild the set on every call; nor under contention
                    // (attempt >= 3), so that conflicting orders never make a select give up; nor
                    // more often than mayReorder allows, so that alternating orders cost no rebuild
                    // per call.
                    state.reorder(invokers, set);
                    return null;
                }
            }
        }
        ServiceState.Target target;
        try {
            target = binding.target(state, set);
        } catch (PolylbException e) {
            throw methodRejected(firstUrl, methodName, e);
        }
        ServiceState.NativeBalancer nb = target.balancer;
        try {
            nb.sync(set);
        } catch (PolylbException e) {
            // A provider list the library rejects (e.g. an address or zone with no UTF-8
            // form): Dubbo's own failure type, so its cluster handles it as any other.
            throw new RpcException("polylb: the provider list of " + firstUrl.getServiceKey()
                    + " was rejected: " + e.getMessage(), e);
        }
        long id;
        try {
            if (candidates == null) {
                id = nb.balancer.selectByKey(target.methodId, key);
            } else if (binding.countsDuplicates) {
                id = selectCountingDuplicates(nb, target.methodId, set, candidates, count);
            } else {
                id = nb.balancer.selectAmong(target.methodId, key == null ? null : key.getBytes(UTF_8),
                        candidates, count, null, 0, 0);
            }
        } catch (PolylbException e) {
            if (nb.applied != set) {
                return null; // raced with an update; e.g. a candidate of the old set is gone
            }
            throw new RpcException("polylb could not select a provider for " + firstUrl.getServiceKey()
                    + "." + methodName + ": " + e.getMessage(), e);
        }
        Invoker<?> chosen = set.invokerById(id);
        if (chosen != null && aliasObjects != null) {
            int position = set.positionOfId(id);
            Invoker<?> own = aliasObjects[position];
            if (attempt == 0 && !chosen.isAvailable() && own.isAvailable()) {
                // What the match's promotion would have found (a live alias of a destroyed
                // member): cover registers the live object, as after an unknown member.
                Selections.cancel(new Selections.Selection(nb.balancer, target.methodId, id, null, false));
                set.forgetAliased();
                state.cover(invokers);
                return null;
            }
            chosen = own;
        } else if (chosen != null && aliased) {
            chosen = set.objectInList(invokers, set.positionOfId(id));
        }
        if (chosen == null || nb.applied != set) {
            // The balancer moved to a newer set between sync and select, so the pick may not
            // be in this call's list: undo it and start over with the current set.
            Selections.cancel(new Selections.Selection(nb.balancer, target.methodId, id, null, false));
            return null;
        }
        Selections.record(invocation,
                new Selections.Selection(nb.balancer, target.methodId, id, chosen.getUrl(), binding.adaptive));
        if (binding.adaptive) {
            invocation.setAttachment(ADAPTIVE_ATTACHMENT, ADAPTIVE_ATTACHMENT_REQUEST);
        }
        @SuppressWarnings("unchecked")
        Invoker<T> result = (Invoker<T>) chosen;
        return result;
    }

    private static final ThreadLocal<int[]> MULTIPLICITY = ThreadLocal.withInitial(() -> new int[64]);

    /**
     * A pick among candidates that may repeat a provider. Dubbo's reselect over more than
     * {@code dubbo.reselect.count} (10) providers draws that many at random, with repeats (its
     * de-duplication test is an "or"), and random, leastactive and shortestresponse then weigh
     * each list element on its own: a provider listed k times has k times its weight (in the
     * least-active group for the latter two). polylb's candidates are a membership filter, so the
     * pick is thinned instead: accepted with probability k / (largest k), else undone and drawn
     * again, which gives each provider its weight times k, as Dubbo does.
     */
    private static long selectCountingDuplicates(ServiceState.NativeBalancer nb, int methodId, InvokerSet set,
            long[] candidates, int count) {
        int[] multiplicity = MULTIPLICITY.get();
        if (multiplicity.length < set.size()) {
            multiplicity = new int[Math.max(set.size(), multiplicity.length * 2)];
            MULTIPLICITY.set(multiplicity);
        }
        int most = 0;
        for (int i = 0; i < count; i++) {
            int p = set.positionOfId(candidates[i]);
            if (p >= 0) {
                most = Math.max(most, ++multiplicity[p]);
            }
        }
        try {
            for (int draw = 0; ; draw++) {
                long id = nb.balancer.selectAmong(methodId, null, candidates, count, null, 0, 0);
                int p = set.positionOfId(id);
                // Expected draws: most / (mean multiplicity) <= 10; the bound only guards a bug.
                if (most <= 1 || p < 0 || draw >= 1000
                        || ThreadLocalRandom.current().nextInt(most) < multiplicity[p]) {
                    return id;
                }
                Selections.cancel(new Selections.Selection(nb.balancer, methodId, id, null, false));
            }
        } finally {
            for (int i = 0; i < count; i++) {
                int p = set.positionOfId(candidates[i]);
                if (p >= 0) {
                    multiplicity[p] = 0;
                }
            }
        }
    }

    /**
     * Counts a call Dubbo sends to {@code invoker} without a pick of polylb's (see
     * PolylbInvokerFilter) when the service is balanced by a polylb extension: the call is
     * recorded as a started pick, so the filter reports it as any other. Does nothing for other
     * load balancers, or for a service, method or provider polylb has not balanced yet.
     */
    static void beginUnpicked(Invoker<?> invoker, Invocation invocation) {
        URL url = invoker.getUrl();
        String methodName = RpcUtils.getMethodName(invocation);
        // The extension Dubbo's cluster invokers use (AbstractClusterInvoker.initLoadBalance).
        String name = url.getMethodParameter(methodName, LOADBALANCE_KEY, DEFAULT_LOADBALANCE);
        if (name == null || !name.startsWith(NAME)) {
            return;
        }
        LoadBalance lb;
        try {
            lb = ScopeModelUtil.getApplicationModel(invocation.getModuleModel())
                    .getExtensionLoader(LoadBalance.class)
                    .getExtension(name);
        } catch (RuntimeException e) {
            return; // no such extension: the cluster failed on it already
        }
        if (lb instanceof PolylbLoadBalance) {
            ((PolylbLoadBalance) lb).beginUnpicked(url, methodName, invocation);
        }
    }

    private void beginUnpicked(URL url, String methodName, Invocation invocation) {
        ServiceState state = services.get(url.getServiceKey() == null ? "" : url.getServiceKey());
        ServiceState.MethodBinding binding = state == null ? null : boundBinding(state, methodName);
        if (binding == null) {
            return;
        }
        InvokerSet set = state.set;
        long id = state.idOf(url);
        if (id < 0 || set.positionOfId(id) < 0) {
            return;
        }
        ServiceState.Target target = binding.target(state, set);
        ServiceState.NativeBalancer nb = target.balancer;
        try {
            nb.sync(set);
            // A lone candidate is picked as is; the library counts it in flight.
            nb.balancer.selectAmong(target.methodId, null, new long[] {id}, 1, null, 0, 0);
        } catch (PolylbException | IllegalStateException e) {
            return; // the set changed, or a sweep retired the state, meanwhile: this call goes uncounted
        }
        Selections.recordStarted(invocation, new Selections.Selection(nb.balancer, target.methodId, id, url, false));
    }

    /**
     * Runs {@link #sweep} every {@value #SWEEP_PERIOD_KEY} ms (application configuration,
     * default {@value #DEFAULT_SWEEP_PERIOD_MS}; 0 or less: never) on Dubbo's shared scheduler,
     * which stops with the framework.
     */
    private void scheduleSweeps(ApplicationModel applicationModel) {
        long periodMs;
        try {
            periodMs = DubboCompat.environment(applicationModel).getConfiguration()
                    .getInt(SWEEP_PERIOD_KEY, DEFAULT_SWEEP_PERIOD_MS);
        } catch (RuntimeException e) {
            periodMs = DEFAULT_SWEEP_PERIOD_MS;
        }
        if (periodMs <= 0 || sweeps != null) {
            return;
        }
        try {
            ScheduledExecutorService scheduler = applicationModel.getFrameworkModel().getBeanFactory()
                    .getBean(FrameworkExecutorRepository.class).getSharedScheduledExecutor();
            sweeps = scheduler.scheduleWithFixedDelay(() -> {
                try {
                    sweep();
                } catch (RuntimeException ignored) {
                    // A failed sweep must not cancel the later ones.
                }
            }, periodMs, periodMs, TimeUnit.MILLISECONDS);
        } catch (RuntimeException e) {
            // No scheduler (a Dubbo without the repository, or one shutting down): states then
            // live until the application's destroy, as before sweeps existed.
        }
    }

    /**
     * Frees the state of each service that had no select since the previous sweep and none of
     * whose invokers is available any more: Dubbo gives a LoadBalance no destroy hook per
     * reference, but a reference's destroy (ReferenceConfig.destroy, a generic reference dropped
     * from its cache) destroys every invoker of its directory. A service whose providers are
     * merely down for a while loses its history at worst; its next select starts a fresh state.
     * Calls still in flight keep their balancer reachable and report into it harmlessly. In the
     * states kept, closes the balancers of configurations no method uses any more
     * ({@link ServiceState#retireUnboundBalancers}).
     *
     * @return how many states were freed
     */
    int sweep() {
        int freed = 0;
        for (Map.Entry<String, ServiceState> e : services.entrySet()) {
            ServiceState state = e.getValue();
            if (state.used) {
                state.used = false;
            } else if (!state.anyAvailable() && services.remove(e.getKey(), state)) {
                state.retire();
                freed++;
                continue;
            }
            state.retireUnboundBalancers();
        }
        return freed;
    }

    /** Services with a state (tests and diagnostics). */
    int serviceCount() {
        return services.size();
    }

    private ServiceState service(String serviceKey) {
        String key = serviceKey == null ? "" : serviceKey;
        ServiceState state = services.get(key);
        if (state == null) {
            state = services.computeIfAbsent(key, k -> new ServiceState());
        }
        return state;
    }

    private static long[] scratch(int n) {
        long[] buffer = CANDIDATES.get();
        if (buffer.length < n) {
            buffer = new long[Math.max(n, buffer.length * 2)];
            CANDIDATES.set(buffer);
        }
        return buffer;
    }

    /**
     * Resolves (and caches per method) the strategy, configuration and method id; recomputed
     * only when the first provider's URL changes, because Dubbo reads these parameters from it
     * (an equal URL object, another reference's, is the same configuration). Method-level weights depend on every provider, so the binding's balancer for them
     * is resolved per provider set ({@link ServiceState.MethodBinding#target}).
     */
    private ServiceState.MethodBinding binding(ServiceState state, String methodName, Invoker<?> first) {
        URL url = first.getUrl();
        ServiceState.MethodBinding binding = state.bindingsByMethod.get(methodName);
        if (binding != null) {
            if (binding.configUrl == url || binding.equalConfigUrl == url) {
                return binding;
            }
            // Rebuilding costs the URL's keys read again, a configuration string and the
            // service's lock: per call, were two references' calls to take turns.
            if (url.equals(binding.configUrl)) {
                binding.equalConfigUrl = url;
                return binding;
            }
        }
        if (binding == null && !methodName.isEmpty()
                && state.bindingsByMethod.size() >= MAX_METHODS_PER_SERVICE) {
            return binding(state, SERVICE_LEVEL, first);
        }
        checkAdapterKeys(url, methodName);
        String strategy = fixedStrategy != null
                ? fixedStrategy
                : adapterParameter(url, methodName, STRATEGY_KEY, DEFAULT_STRATEGY);
        StringBuilder config = new StringBuilder("loadbalance=").append(strategy);
        int[] hashArguments = null;
        if (RING.contains(strategy)) {
            config.append("&hash.nodes=")
                    .append(url.getMethodParameter(methodName, DubboUrls.HASH_NODES, DubboUrls.DEFAULT_HASH_NODES));
        }
        if (HASHING.contains(strategy)) {
            hashArguments = DubboUrls.hashArguments(url, methodName);
        }
        boolean adaptive = "adaptive".equals(strategy);
        if (adaptive) {
            config.append("&timeout=")
                    .append(url.getMethodPositiveParameter(methodName, DubboUrls.TIMEOUT, DubboUrls.DEFAULT_TIMEOUT_MS));
        }
        String extra = adapterParameter(url, methodName, EXTRA_CONFIG_KEY, null);
        if ("shortestresponse".equals(strategy) && (extra == null || !extra.contains(SLIDE_PERIOD_KEY))) {
            config.append('&').append(SLIDE_PERIOD_KEY).append('=').append(slidePeriodMs);
        }
        if (extra != null && !extra.isEmpty()) {
            config.append('&').append(extra);
        }
        boolean uniformWeights = "random".equals(strategy) && !DubboUrls.declaresWeight(first, methodName);
        // Dubbo's ring ignores weights; so does random when it ignores them all (its quirk above).
        boolean methodWeightsApply = !uniformWeights && !"consistenthash".equals(strategy);
        // Under the state's lock, as sweeps retire balancers no binding holds: the one taken here
        // is bound before a sweep can look at it.
        synchronized (state) {
            ServiceState.NativeBalancer nb;
            try {
                nb = state.balancerFor(config.toString(), uniformWeights);
            } catch (PolylbException e) {
                throw new RpcException("polylb: bad load-balancing configuration for " + url.getServiceKey() + "."
                        + methodName + " (" + config + "): " + e.getMessage(), e);
            }
            nb.bound = true;
            try {
                binding = new ServiceState.MethodBinding(url, methodName, config.toString(), nb, hashArguments,
                        adaptive, methodWeightsApply, COUNTS_DUPLICATES.contains(strategy), listOrderOf(strategy));
                state.bindingsByMethod.put(methodName, binding);
            } catch (PolylbException e) {
                if (methodName.isEmpty()) {
                    throw methodRejected(url, methodName, e);
                }
                binding = null; // a name the library cannot take (no UTF-8 form, or its table full)
            }
        }
        return binding != null ? binding : binding(state, SERVICE_LEVEL, first);
    }

    /**
     * The binding a method's calls are balanced under, or null when no select bound it yet: a
     * name past {@link #MAX_METHODS_PER_SERVICE} takes the service level's.
     */
    private static ServiceState.MethodBinding boundBinding(ServiceState state, String methodName) {
        ServiceState.MethodBinding binding = state.bindingsByMethod.get(methodName);
        if (binding == null && (state.bindingsByMethod.size() >= MAX_METHODS_PER_SERVICE
                || !DubboUrls.hashable(methodName).equals(methodName))) {
            // Past the cap, or a name with no UTF-8 form (a lone surrogate: `hashable` writes
            // '?' for it), which the library never takes: both are balanced at the service level.
            return state.bindingsByMethod.get(SERVICE_LEVEL);
        }
        return binding;
    }

    /**
     * One of the adapter's own keys, method level first. Dubbo 3 keeps a method-level value in
     * its method table only for keys it knows: set through a {@code <dubbo:method>}'s parameters
     * (which reach the URL by {@code addParameters}), {@code sayHello.polylb.strategy} stays a
     * flat parameter that {@code getMethodParameter} does not see, so that is read too. Dubbo's
     * own keys ({@code hash.nodes}, {@code hash.arguments}, {@code timeout}) are read as Dubbo
     * reads them.
     */
    static String adapterParameter(URL url, String methodName, String key, String defaultValue) {
        String flat = url.getParameter(methodName + "." + key);
        if (flat != null && !flat.isEmpty()) {
            return flat;
        }
        return url.getMethodParameter(methodName, key, defaultValue);
    }

    /** The adapter's keys, as {@code polylb.<name>} or {@code <method>.polylb.<name>}. */
    private static final List<String> ADAPTER_KEY_NAMES = List.of("strategy", "config");

    /**
     * A misspelt adapter key would otherwise leave the default in place without a word
     * ({@code polylb.strateg=roundrobin} balancing at random). Only near misses of the adapter's
     * keys are refused: Dubbo writes a method's attributes as {@code <method>.<attribute>}, so a
     * method named {@code polylb} gives {@code polylb.timeout}, and a provider on a later
     * adapter may carry keys this one does not know. The library's own keys are checked by the
     * library, inside {@value #EXTRA_CONFIG_KEY}.
     */
    private static void checkAdapterKeys(URL url, String methodName) {
        for (String key : url.getParameters().keySet()) {
            int at = 0;
            if (!key.startsWith("polylb.")) {
                int dot = key.indexOf(".polylb.");
                if (dot < 0) {
                    continue;
                }
                at = dot + 1;
            }
            String name = key.substring(at + "polylb.".length());
            for (String known : ADAPTER_KEY_NAMES) {
                if (!name.equals(known) && editDistance(name.toLowerCase(Locale.ROOT), known) <= 2) {
                    throw new RpcException("polylb: unknown URL parameter '" + key + "' for " + url.getServiceKey()
                            + "." + methodName + "; did you mean '" + key.substring(0, at) + "polylb." + known
                            + "'? (the adapter reads " + STRATEGY_KEY + " and " + EXTRA_CONFIG_KEY
                            + ", also as <method>." + STRATEGY_KEY + ")");
                }
            }
        }
    }

    private static int editDistance(String a, String b) {
        int[] row = new int[b.length() + 1];
        for (int j = 0; j <= b.length(); j++) {
            row[j] = j;
        }
        for (int i = 1; i <= a.length(); i++) {
            int diagonal = row[0];
            row[0] = i;
            for (int j = 1; j <= b.length(); j++) {
                int above = row[j];
                row[j] = Math.min(Math.min(row[j] + 1, row[j - 1] + 1),
                        diagonal + (a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1));
                diagonal = above;
            }
        }
        return row[b.length()];
    }

    /**
     * A method the library cannot balance (its own weights' balancer refused it; a name it
     * cannot take is balanced at the service level instead). Dubbo's callers expect a
     * LoadBalance to fail with RpcException only.
     */
    private static RpcException methodRejected(URL url, String methodName, PolylbException e) {
        return new RpcException("polylb: method " + methodName + " of " + url.getServiceKey()
                + " cannot be balanced: " + e.getMessage(), e);
    }

    /** The state of a service, or null (tests and diagnostics). */
    ServiceState serviceState(String serviceKey) {
        return services.get(serviceKey);
    }

    /**
     * polylb's view of a service (serviceKey, e.g. {@code com.example.DemoService} or
     * {@code group/com.example.DemoService:1.0}): one stats JSON per native balancer, with
     * per-provider weights, effective weights, in-flight and success/failure counters.
     *
     * @param serviceKey the service's key
     * @return the JSON of each of its native balancers; empty when this instance holds no state
     *     for the service (never balanced here, or freed)
     * @throws NullPointerException if {@code serviceKey} is null
     */
    public List<String> statsJson(String serviceKey) {
        ServiceState state = services.get(Objects.requireNonNull(serviceKey, "serviceKey"));
        return state == null ? List.of() : state.statsJson();
    }

    /**
     * Feeds a provider's load report (ORCA's numbers) to the balancers of its service, for
     * {@code orca}: queries per second it served, of them failed, and its utilization (see
     * {@link io.polylb.Balancer#reportLoad(long, double, double, double)}). Dubbo providers send
     * no such report; a consumer that gets one (an attachment its providers add, a metrics
     * endpoint) hands it over here, e.g. from its own {@code Filter} with the call's
     * {@code invoker}. Balancers of other strategies ignore it.
     *
     * @param provider the provider the report is about (its URL names the service and the
     *     provider: {@code protocol://host:port/path})
     * @param qps queries per second, finite and {@code >= 0}
     * @param eps failed queries per second, finite, {@code >= 0} and at most {@code qps}
     * @param utilization how busy the provider is (CPU or its own measure, 1.0 = full), finite
     *     and {@code >= 0}
     * @return whether a balancer of this instance took it: false when this instance has not
     *     balanced the provider's service, or does not know the provider (yet)
     * @throws NullPointerException if {@code provider} is null
     * @throws PolylbException {@link io.polylb.Status#INVALID_ARGUMENT} for a number out of its
     *     range, whether or not a balancer would take the report
     */
    public boolean reportLoad(Invoker<?> provider, double qps, double eps, double utilization) {
        URL url = Objects.requireNonNull(provider, "provider").getUrl();
        String problem = Balancer.loadReportProblem(qps, eps, utilization);
        if (problem != null) {
            throw new PolylbException(Status.INVALID_ARGUMENT, Status.INVALID_ARGUMENT.code(),
                    Status.INVALID_ARGUMENT + ": " + problem);
        }
        String serviceKey = url.getServiceKey();
        ServiceState state = services.get(serviceKey == null ? "" : serviceKey);
        return state != null && state.reportLoad(url, qps, eps, utilization);
    }

    /**
     * Forgets every service (Dubbo calls this when the application shuts down). The balancers are
     * not closed here: calls still running on other threads would then fail instead of finishing.
     * Each is freed by its Cleaner once the last of those calls has dropped it.
     */
    @Override
    public void destroy() {
        ScheduledFuture<?> s = sweeps;
        if (s != null) {
            s.cancel(false);
        }
        services.clear();
    }

    /** {@code loadbalance="polylb-random"}: Dubbo's weighted random with warm-up. */
    public static class Random extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public Random() {
            super("random");
        }
    }

    /** {@code loadbalance="polylb-roundrobin"}: Dubbo's smooth weighted round robin. */
    public static class RoundRobin extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public RoundRobin() {
            super("roundrobin");
        }
    }

    /** {@code loadbalance="polylb-leastactive"}: fewest calls in flight, weighted tie-break. */
    public static class LeastActive extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public LeastActive() {
            super("leastactive");
        }
    }

    /** {@code loadbalance="polylb-shortestresponse"}: Dubbo's windowed mean latency x (active + 1). */
    public static class ShortestResponse extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public ShortestResponse() {
            super("shortestresponse");
        }
    }

    /** {@code loadbalance="polylb-consistenthash"}: Dubbo's ketama ring (hash.nodes, hash.arguments). */
    public static class ConsistentHash extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public ConsistentHash() {
            super("consistenthash");
        }
    }

    /** {@code loadbalance="polylb-adaptive"}: Dubbo's P2C over provider-reported load. */
    public static class Adaptive extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public Adaptive() {
            super("adaptive");
        }
    }

    /** {@code loadbalance="polylb-p2c"}: weighted power of two choices (a polylb strategy). */
    public static class P2c extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public P2c() {
            super("p2c");
        }
    }

    /** {@code loadbalance="polylb-peakewma"}: peak-EWMA latency P2C (a polylb strategy). */
    public static class PeakEwma extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public PeakEwma() {
            super("peakewma");
        }
    }

    /** {@code loadbalance="polylb-boundedhash"}: consistent hashing with bounded load (a polylb strategy). */
    public static class BoundedHash extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public BoundedHash() {
            super("boundedhash");
        }
    }

    /**
     * {@code loadbalance="polylb-maglev"}: weighted Maglev consistent hashing (a polylb strategy;
     * {@code hash.arguments} as for {@code consistenthash}, table size {@code maglev.tableSize}
     * through {@value #EXTRA_CONFIG_KEY}).
     */
    public static class Maglev extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public Maglev() {
            super("maglev");
        }
    }

    /**
     * {@code loadbalance="polylb-rendezvous"}: weighted rendezvous (highest random weight) hashing
     * (a polylb strategy; {@code hash.arguments} as for {@code consistenthash}; a failover's retry
     * takes the key's next choice, the same on every consumer).
     */
    public static class Rendezvous extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public Rendezvous() {
            super("rendezvous");
        }
    }

    /**
     * {@code loadbalance="polylb-orca"}: weighted round robin by the providers' load reports
     * (gRPC's {@code weighted_round_robin}, a polylb strategy; {@code orca.*} through
     * {@value #EXTRA_CONFIG_KEY}). Dubbo providers send no such reports: feed them with
     * {@link #reportLoad}; until two providers' reports count, the configured weights deal the
     * calls in turn.
     */
    public static class Orca extends PolylbLoadBalance {
        /** The extension, as Dubbo's extension loader creates it. */
        public Orca() {
            super("orca");
        }
    }
}
