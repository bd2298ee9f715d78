package io.polylb.dubbo;

import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.RandomAccess;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.cluster.router.state.BitList;

/**
 * An immutable snapshot of the providers of one service as registered with polylb: each
 * Invoker object, its stable polylb id and the URL parameters polylb needs.
 *
 * <p>Dubbo hands the balancer a list per call (after routing); this class answers, cheaply,
 * "is that list exactly this set, a subset of it, or does it hold providers we do not know?".
 *
 * <p>A registry refresh replaces Invoker objects (same provider identity, possibly new
 * parameters) while calls may still hold the previous list. The set keeps one member per
 * provider (the newest object, see {@link ServiceState#cover}); the other objects of the same
 * provider that calls were seen with are <em>aliases</em> of that member: they match its
 * position and id, and the pick is handed back as the call's own object
 * ({@link #objectInList}). A destroyed object whose provider has no member any more (the
 * registry removed it; a call still holds the previous list) is a <em>dead</em> alias: never a
 * candidate, so the call picks among its live providers and the set is not rebuilt for it.
 * Aliases are added without a new set (no native update).
 */
final class InvokerSet {
    static final InvokerSet EMPTY = new InvokerSet(0, new Invoker<?>[0], new long[0], new DubboUrls.ProviderParams[0]);

    /** Grows with every replacement, so a balancer never goes back to an older set. */
    final long generation;
    final Invoker<?>[] invokers;
    final long[] ids;
    /** Service-level parameters (Dubbo's getWeight inputs for a method without overrides). */
    final DubboUrls.ProviderParams[] params;
    /**
     * Per method name, the parameters its calls see: {@link #params} itself when no provider's
     * {@code <method>.weight} changes anything. Filled lazily, once per (set, method).
     */
    private final ConcurrentHashMap<String, DubboUrls.ProviderParams[]> paramsByMethod = new ConcurrentHashMap<>();
    private final IdentityHashMap<Invoker<?>, Integer> positionByInvoker;
    private final LongIntMap positionById;
    /** Two members share a ring address (host:port), so their points collide on Dubbo's ring. */
    final boolean sharesAddresses;

    /**
     * Other objects of members' providers (older or newer Invoker objects with the same identity)
     * → the member's position, or {@link #DEAD} for a destroyed object of a provider that left.
     * Copy-on-write under the ServiceState's lock; null while empty. Read only for objects that
     * are not members, so the per-call paths never touch it.
     */
    private volatile IdentityHashMap<Invoker<?>, Integer> aliases;

    /**
     * The last per-call list object found to equal this set (same members, same order); lets
     * the common case (a directory handing out the same list) skip the O(n) comparison. Racy
     * writes are fine: any value it holds was verified.
     */
    volatile List<?> lastEqualList;

    /**
     * Dubbo's router chain hands out a fresh BitList per call, a view over the directory's
     * list: when that origin list was found equal to this set, a BitList over all of it (no bit
     * cleared, no tail) is equal too, without walking it (BitList iteration locks per element).
     */
    volatile List<?> lastEqualOrigin;

    /**
     * The last per-call list found to hold every provider in set order through aliases (another
     * reference's objects of the same providers), with the list's object for each position: its
     * calls then skip the O(n) match and the O(n) search for their own object of the pick (20–40
     * µs at 1,000 providers). For a router's BitList over all of its origin, the origin is kept,
     * as {@link #lastEqualOrigin} is (a BitList is new on every call). One holder, so a reader
     * never pairs a list with another's objects.
     */
    private volatile AliasedList lastAliasedList;

    /** A list (or a BitList's origin) that stands for the whole set through aliases. */
    private record AliasedList(List<?> list, boolean origin, int size, Invoker<?>[] objects) {}

    /** How many subset sizes {@link #subsetNeedsCheck} remembers. */
    static final int CHECKED_SUBSET_SIZES = 8;
    /** One select among a subset in this many checks for destroyed providers anyway. */
    static final int SUBSET_CHECK_EVERY = 1024;

    /**
     * Sizes of the last strict subsets checked for destroyed providers: a removal shows up as a
     * list of a new size once, a router's subsets repeat their sizes, so the check runs rarely.
     * Several sizes, not the last one only: two routers (or two references' routers) whose
     * subsets take turns would otherwise check, an O(n) walk and an O(n) map, on every call.
     * Racy plain fields: a lost write costs one more check, never a skipped removal for long
     * (see {@link #SUBSET_CHECK_EVERY}).
     */
    private final int[] checkedSubsetSizes = {-1, -1, -1, -1, -1, -1, -1, -1};
    private int nextCheckedSlot;
    private int subsetSelects;

    /**
     * Whether a select among a strict subset of {@code size} candidates should check for
     * destroyed providers ({@link ServiceState#prune}): a size not among the last ones checked,
     * and every {@value #SUBSET_CHECK_EVERY}-th subset select (a provider that leaves while the
     * directory's list takes a size a routed subset had would otherwise stay a member until the
     * set changes).
     */
    boolean subsetNeedsCheck(int size) {
        for (int known : checkedSubsetSizes) {
            if (known == size) {
                return ++subsetSelects % SUBSET_CHECK_EVERY == 0;
            }
        }
        checkedSubsetSizes[nextCheckedSlot++ & (CHECKED_SUBSET_SIZES - 1)] = size;
        return true;
    }

    InvokerSet(long generation, Invoker<?>[] invokers, long[] ids, DubboUrls.ProviderParams[] params) {
        this(generation, invokers, ids, params, null);
    }

    /**
     * @param aliases alias object → its member (an element of {@code invokers}), or null for a
     *     dead alias; may be null
     */
    InvokerSet(long generation, Invoker<?>[] invokers, long[] ids, DubboUrls.ProviderParams[] params,
            IdentityHashMap<Invoker<?>, Invoker<?>> aliases) {
        this.generation = generation;
        this.invokers = invokers;
        this.ids = ids;
        this.params = params;
        this.positionByInvoker = new IdentityHashMap<>(invokers.length * 2);
        this.positionById = new LongIntMap(invokers.length);
        HashSet<String> addresses = new HashSet<>(invokers.length * 2);
        boolean shared = false;
        for (int i = 0; i < invokers.length; i++) {
            positionByInvoker.put(invokers[i], i);
            positionById.put(ids[i], i);
            shared |= !addresses.add(DubboUrls.address(invokers[i]));
        }
        this.sharesAddresses = shared;
        if (aliases != null && !aliases.isEmpty()) {
            IdentityHashMap<Invoker<?>, Integer> a = new IdentityHashMap<>(aliases.size() * 2);
            aliases.forEach((alias, member) -> putAlias(a, alias, member));
            this.aliases = a.isEmpty() ? null : a;
        }
    }

    int size() {
        return invokers.length;
    }

    /**
     * The parameters calls of {@code methodName} see (Dubbo reads {@code <method>.weight} before
     * {@code weight}); the very {@link #params} array when they are the service-level ones.
     * Reads provider URLs on the first request per method only.
     */
    DubboUrls.ProviderParams[] paramsFor(String methodName) {
        DubboUrls.ProviderParams[] p = paramsByMethod.get(methodName);
        if (p == null) {
            p = paramsByMethod.computeIfAbsent(methodName, this::readParams);
        }
        return p;
    }

    /** True when some provider's {@code <methodName>.weight} gives that method other weights. */
    boolean methodWeightsDiffer(String methodName) {
        return paramsFor(methodName) != params;
    }

    private DubboUrls.ProviderParams[] readParams(String methodName) {
        DubboUrls.ProviderParams[] own = null;
        for (int i = 0; i < invokers.length; i++) {
            DubboUrls.ProviderParams p = DubboUrls.providerParams(invokers[i], methodName);
            if (own == null && !p.equals(params[i])) {
                own = params.clone();
            }
            if (own != null) {
                own[i] = p;
            }
        }
        return own == null ? params : own;
    }

    /** Value of a dead alias (a destroyed object whose provider has no member). */
    static final int DEAD = -1;

    private void putAlias(IdentityHashMap<Invoker<?>, Integer> into, Invoker<?> alias, Invoker<?> member) {
        if (positionByInvoker.containsKey(alias)) {
            return;
        }
        if (member == null) {
            into.put(alias, DEAD);
        } else {
            Integer p = positionByInvoker.get(member);
            if (p != null) {
                into.put(alias, p);
            }
        }
    }

    /**
     * Position of an Invoker object in this set, as a member or as an alias of one; -1 if it is
     * unknown or a dead alias.
     */
    int positionOf(Invoker<?> invoker) {
        Integer p = positionByInvoker.get(invoker);
        if (p == null) {
            IdentityHashMap<Invoker<?>, Integer> a = aliases;
            p = a == null ? null : a.get(invoker);
        }
        return p == null ? -1 : p;
    }

    /** True when {@code invoker} is a member object (not an alias) of this set. */
    boolean isMember(Invoker<?> invoker) {
        return positionByInvoker.containsKey(invoker);
    }

    /**
     * The alias objects and their members, for carrying them over to the next set (dead aliases
     * are not: they are destroyed objects, re-added if a call still holds one).
     */
    IdentityHashMap<Invoker<?>, Invoker<?>> aliasMembers() {
        IdentityHashMap<Invoker<?>, Integer> a = aliases;
        IdentityHashMap<Invoker<?>, Invoker<?>> out = new IdentityHashMap<>();
        if (a != null) {
            a.forEach((alias, p) -> {
                if (p >= 0) {
                    out.put(alias, invokers[p]);
                }
            });
        }
        return out;
    }

    /**
     * How many aliases a set keeps at most: normally one or two per member (the previous
     * generation of objects), more only if a caller keeps handing out new objects.
     */
    int aliasLimit() {
        return 4 * invokers.length + 16;
    }

    int aliasCount() {
        IdentityHashMap<Invoker<?>, Integer> a = aliases;
        return a == null ? 0 : a.size();
    }

    /**
     * Adds aliases (object → member of this set) without changing the set. Callers hold the
     * ServiceState's lock (the only writer); readers see either map, both valid.
     */
    void addAliases(IdentityHashMap<Invoker<?>, Invoker<?>> more) {
        IdentityHashMap<Invoker<?>, Integer> a = aliases;
        // Bounded: past the limit the earlier aliases go (a call still holding one re-adds it).
        IdentityHashMap<Invoker<?>, Integer> next = a == null || a.size() + more.size() > aliasLimit()
                ? new IdentityHashMap<>()
                : new IdentityHashMap<>(a);
        more.forEach((alias, member) -> putAlias(next, alias, member));
        aliases = next.isEmpty() ? null : next;
    }

    /**
     * The object of the call's {@code list} that stands for the member at {@code position},
     * after a {@link #match} that went through aliases: the member itself if the list holds it,
     * else the first alias of it (the call's own object of that provider). Null if none.
     */
    Invoker<?> objectInList(List<? extends Invoker<?>> list, int position) {
        Invoker<?> member = invokers[position];
        Invoker<?> first = null;
        for (Invoker<?> invoker : list) {
            if (invoker == member) {
                return invoker;
            }
            if (first == null && positionOf(invoker) == position) {
                first = invoker;
            }
        }
        return first;
    }

    /**
     * True when the first {@code count} candidates (ids, in a call's list order) are distinct
     * members in another order than this set's: a scan in set order would meet them in another
     * order than the list. False for candidates in set order, and for a list repeating a member.
     */
    boolean outOfOrder(long[] candidates, int count) {
        int previous = -1;
        boolean increasing = true;
        for (int i = 0; i < count && increasing; i++) {
            int p = positionById.get(candidates[i]);
            increasing = p > previous;
            previous = p;
        }
        if (increasing) {
            return false;
        }
        boolean[] seen = new boolean[invokers.length];
        for (int i = 0; i < count; i++) {
            int p = positionById.get(candidates[i]);
            if (p < 0 || seen[p]) {
                return false;
            }
            seen[p] = true;
        }
        return true;
    }

    /** Position of a polylb id in this set, or -1. */
    int positionOfId(long id) {
        return positionById.get(id);
    }

    /** True when the first {@code count} candidates are exactly this set's ids in order. */
    boolean allInOrder(long[] candidates, int count) {
        if (count != ids.length) {
            return false;
        }
        for (int i = 0; i < count; i++) {
            if (candidates[i] != ids[i]) {
                return false;
            }
        }
        return true;
    }

    /** The Invoker with a polylb id, or null if the id is not in this set. */
    Invoker<?> invokerById(long id) {
        int p = positionById.get(id);
        return p < 0 ? null : invokers[p];
    }

    /**
     * True when {@code list} is known, without walking it, to equal this set. A list is known by
     * identity (Dubbo's directories hand out a new list per change); its size and, for a
     * random-access list, its two ends are checked too, so that a list a caller changed in place
     * after a select (an element removed, added, or both) is walked again. Only a same-size
     * change strictly inside such a list goes unseen.
     */
    boolean knownEqual(List<?> list) {
        if (list == lastEqualList) {
            int n = invokers.length;
            return list.size() == n && (n == 0 || !(list instanceof RandomAccess) || list instanceof BitList
                    || (list.get(0) == invokers[0] && list.get(n - 1) == invokers[n - 1]));
        }
        if (list instanceof BitList) {
            BitList<?> bits = (BitList<?>) list;
            List<?> origin = bits.getOriginList();
            return origin == lastEqualOrigin && origin.size() == bits.size() && !bits.hasMoreElementInTailList();
        }
        return false;
    }

    /** Remembers a list found equal by {@link #match}, for {@link #knownEqual}. */
    void rememberEqual(List<?> list) {
        lastEqualList = list;
        if (list instanceof BitList) {
            BitList<?> bits = (BitList<?>) list;
            List<?> origin = bits.getOriginList();
            if (origin.size() == bits.size() && !bits.hasMoreElementInTailList()) {
                lastEqualOrigin = origin;
            }
        }
    }

    /**
     * The call's object for each position when {@code list} is known, without walking it, to hold
     * every provider in set order through aliases ({@link #rememberAliased}); else null. Checked as
     * {@link #knownEqual} checks: identity (a BitList's: its origin's, whole), size and, for a
     * random-access list, its two ends.
     */
    Invoker<?>[] knownAliased(List<?> list) {
        AliasedList known = lastAliasedList;
        if (known == null) {
            return null;
        }
        if (list instanceof BitList) {
            BitList<?> bits = (BitList<?>) list;
            List<?> origin = bits.getOriginList();
            return known.origin && origin == known.list && origin.size() == known.size
                    && bits.size() == known.size && !bits.hasMoreElementInTailList() ? known.objects : null;
        }
        if (known.origin || known.list != list || list.size() != known.size) {
            return null;
        }
        Invoker<?>[] objects = known.objects;
        if (list instanceof RandomAccess && known.size > 0
                && (list.get(0) != objects[0] || list.get(known.size - 1) != objects[objects.length - 1])) {
            return null;
        }
        return objects;
    }

    /**
     * Remembers a list whose {@link #match} put every provider in set order with some alias among
     * them: each position's object is the first the list holds for it, as {@link #objectInList}
     * finds. Only a list without dead aliases or repeats (one object per position) is kept, so
     * that {@link #knownAliased}'s check of the ends means what it says.
     */
    void rememberAliased(List<? extends Invoker<?>> list) {
        int n = invokers.length;
        if (list.size() != n) {
            return;
        }
        Invoker<?>[] objects = new Invoker<?>[n];
        int i = 0;
        for (Invoker<?> invoker : list) {
            if (i >= n || positionOf(invoker) != i) {
                return;
            }
            objects[i++] = invoker;
        }
        if (list instanceof BitList) {
            BitList<?> bits = (BitList<?>) list;
            List<?> origin = bits.getOriginList();
            if (origin.size() == n && !bits.hasMoreElementInTailList()) {
                lastAliasedList = new AliasedList(origin, true, n, objects);
            }
        } else {
            lastAliasedList = new AliasedList(list, false, n, objects);
        }
    }

    /** Drops the remembered aliased list (its member at some position is no longer usable). */
    void forgetAliased() {
        lastAliasedList = null;
    }

    static final int EQUAL = -1;
    static final int UNKNOWN_MEMBER = -2;
    /** Flag on a count: some element matched as an alias (the pick must be mapped back). */
    static final int ALIASED = 1 << 30;

    /**
     * Compares a per-call list with this set. Returns {@link #EQUAL} when it holds exactly this
     * set's invokers in this order, {@link #UNKNOWN_MEMBER} when it holds an invoker this set
     * lacks, otherwise the number of candidates written to {@code candidates} (their ids, in
     * list order), with {@link #ALIASED} set when some element is an alias (then the pick must
     * be mapped back with {@link #objectInList}; dead aliases are skipped, and a list of nothing
     * else answers {@link #UNKNOWN_MEMBER}).
     *
     * @param promote also answer {@link #UNKNOWN_MEMBER} for a live alias of a destroyed member,
     *     so that {@link ServiceState#cover} registers the live object instead
     */
    int match(List<? extends Invoker<?>> list, long[] candidates, boolean promote) {
        boolean sameOrder = list.size() == invokers.length;
        int aliased = 0;
        int i = 0;
        // An iterator, not get(i): Dubbo's routed BitList walks its bitmap on every get.
        for (Invoker<?> invoker : list) {
            Integer member = positionByInvoker.get(invoker);
            int p;
            if (member != null) {
                p = member;
            } else {
                IdentityHashMap<Invoker<?>, Integer> a = aliases;
                Integer alias = a == null ? null : a.get(invoker);
                if (alias == null) {
                    return UNKNOWN_MEMBER;
                }
                p = alias;
                aliased = ALIASED;
                sameOrder = false;
                if (p == DEAD) {
                    continue;
                }
                if (promote && !invokers[p].isAvailable() && invoker.isAvailable()) {
                    return UNKNOWN_MEMBER;
                }
            }
            sameOrder &= p == i;
            candidates[i++] = ids[p];
        }
        if (i == 0) {
            return UNKNOWN_MEMBER; // only dead aliases: ServiceState.cover registers them
        }
        return sameOrder ? EQUAL : i | aliased;
    }

    /** A minimal open-addressing map from id to position (ids are never negative). */
    static final class LongIntMap {
        private final long[] keys;
        private final int[] values;
        private final int mask;

        LongIntMap(int expected) {
            int capacity = Integer.highestOneBit(Math.max(4, expected * 2 - 1)) << 1;
            keys = new long[capacity];
            values = new int[capacity];
            mask = capacity - 1;
            java.util.Arrays.fill(keys, -1L);
        }

        private static int slot(long key) {
            long h = key * 0x9E3779B97F4A7C15L;
            return (int) (h ^ (h >>> 32));
        }

        void put(long key, int value) {
            int i = slot(key) & mask;
            while (keys[i] != -1L && keys[i] != key) {
                i = (i + 1) & mask;
            }
            keys[i] = key;
            values[i] = value;
        }

        int get(long key) {
            int i = slot(key) & mask;
            while (true) {
                long k = keys[i];
                if (k == key) {
                    return values[i];
                }
                if (k == -1L) {
                    return -1;
                }
                i = (i + 1) & mask;
            }
        }
    }
}
