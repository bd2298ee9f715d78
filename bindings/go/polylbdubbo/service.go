package polylbdubbo

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"

	polylb "github.com/polylb/polylb/bindings/go"
)

// serviceState is what one extension keeps for one service (dubbo-go's
// ServiceKey: group/interface:version): the provider set, shared by one
// polylb Balancer per distinct configuration (methods may differ in
// hash.nodes, polylb.config, …), plus one per method that providers weigh on
// its own (methods.<m>.weight). Per-method state (round-robin positions,
// calls in flight, latency windows) lives in the Balancer, keyed by method.
type serviceState struct {
	lb         *LoadBalance
	serviceKey string
	// groups: the state of a multi-group reference's groups (groupsPrefix),
	// whose members are cluster invokers, one per group.
	groups bool

	set atomic.Pointer[invokerSet]

	// mu serialises set changes and balancer creation: a set is published
	// only once every balancer holds it.
	mu        sync.Mutex
	balancers map[balancerKey]*polylb.Balancer
	// listed: the balancers, republished under mu at each change, for
	// Stats to read without mu (a stats call over a large set takes
	// tenths of a second, which held mu would add to a concurrent set
	// change or a method's first select).
	listed atomic.Pointer[[]*polylb.Balancer]
	// unbound: balancers that no method's binding held at a set change,
	// since the first such change (see closeUnbound).
	unbound map[balancerKey]time.Time
	nextID  uint64

	bindings sync.Map     // method name -> *binding
	methods  atomic.Int64 // names in bindings

	// lastSubset is the size of the last routed subset checked for
	// destroyed members (the check runs when that size changes).
	lastSubset atomic.Int64
	// subsetSelects counts selects among a subset, for the check that runs
	// every pruneEvery of them.
	subsetSelects atomic.Int64

	used    atomic.Bool // a select since the last sweep
	retired atomic.Bool // swept: its balancers are closed
}

// balancerKey names one of a service's balancers: its config string and the
// method whose own weights its set carries ("" for the service's weights).
type balancerKey struct {
	config    string
	weightsOf string
}

// binding is how calls of one method are balanced, made for one set
// generation (its configuration comes from the first provider's URL).
type binding struct {
	gen      uint64
	balancer *polylb.Balancer
	method   polylb.Method
	hashArgs []int
	// sequenced: see methodConfig.
	sequenced bool
	// first: the URL the configuration was read from; config: what it said.
	// Two references to one service share the bindings, each with its own
	// parameters: a call whose first URL is another reads its own.
	first  *common.URL
	config string
}

func newServiceState(lb *LoadBalance, serviceKey string) *serviceState {
	st := &serviceState{lb: lb, serviceKey: serviceKey, balancers: map[balancerKey]*polylb.Balancer{},
		unbound: map[balancerKey]time.Time{}, groups: strings.HasPrefix(serviceKey, groupsPrefix)}
	st.used.Store(true) // a sweep right after its creation must not free it
	return st
}

// cover makes the set cover list (see nextSet) and hands it to every
// balancer. Caller holds mu.
func (st *serviceState) cover(list []base.Invoker) error {
	now := time.Now()
	st.closeUnbound(now)
	next := nextSet(st.set.Load(), list, &st.nextID, now, st.memberKey)
	if st.groups {
		next.asGroups()
	}
	for k, b := range st.balancers {
		if err := b.Update(next.weightsFor(k.weightsOf)); err != nil {
			return fmt.Errorf("polylb: the providers of %s were rejected (%s): %w", st.serviceKey, k.config, err)
		}
	}
	st.set.Store(next)
	return nil
}

// memberKey is the identity of a member of st's sets: a provider's (see
// identity), or for a multi-group reference's groups the group's service
// key (group/interface:version), which stays while refreshes replace the
// group's cluster invoker (and the provider whose URL it carries). The
// groups' providers may share addresses (one process exporting the service
// in two groups): keyed by the URL's address, two groups would be one member.
func (st *serviceState) memberKey(u *common.URL) string {
	if st.groups {
		return u.ServiceKey()
	}
	return identity(u)
}

// closeUnbound closes the balancers of configurations that no method's
// binding has held since a set change at least a sweep period ago (see
// SetSweepPeriod): values that providers' URLs no longer give (a changed
// hash.nodes or polylb.config). Kept, each would hold its own copy of the
// set, be updated at every set change and count against memory for the life
// of the service. Bindings are made under mu, as this runs, so none made
// later holds a closed balancer; a select that loaded an older binding of
// one gets ErrClosed and starts over. Caller holds mu.
func (st *serviceState) closeUnbound(now time.Time) {
	period := time.Duration(sweepPeriod.Load())
	if period <= 0 || len(st.balancers) < 2 {
		return
	}
	held := make(map[*polylb.Balancer]bool, len(st.balancers))
	st.bindings.Range(func(_, v any) bool {
		held[v.(*binding).balancer] = true
		return true
	})
	closed := false
	for k, b := range st.balancers {
		since, unbound := st.unbound[k]
		switch {
		case held[b]:
			delete(st.unbound, k)
		case !unbound:
			st.unbound[k] = now
		case now.Sub(since) >= period:
			b.Close()
			delete(st.balancers, k)
			delete(st.unbound, k)
			closed = true
		}
	}
	if closed {
		st.publishBalancers()
	}
}

// pruneEvery: one select among a subset in this many checks for destroyed
// members even when the subset's size did not change.
const pruneEvery = 1024

// pruneIfDestroyed drops members that list does not hold and that are
// destroyed (providers that left the registry), so that a shrinking
// directory does not keep their state forever. It runs when a subset of a
// new size arrives, and every pruneEvery selects among subsets, not per call. Destroyed, not unavailable: dubbo-go's
// reselect passes lists without the unavailable providers (a dubbo-protocol
// invoker while its connection is down), of sizes that change call after
// call, and dropping those providers rebuilt the set per call and gave them
// new ids (losing their counters) each time they were seen again.
func (st *serviceState) pruneIfDestroyed(s *invokerSet, list []base.Invoker) error {
	inList := make([]bool, len(s.members))
	for _, inv := range list {
		if pos, ok := s.position(inv); ok {
			inList[pos] = true
		}
	}
	for pos, inv := range s.members {
		if !inList[pos] && destroyed(inv) {
			st.mu.Lock()
			defer st.mu.Unlock()
			if st.set.Load() != s {
				return nil // changed meanwhile; the caller retries
			}
			return st.cover(list)
		}
	}
	return nil
}

// maxMethodsPerService is how many method names a service balances each on
// its own; new names past them (a gateway forwarding generic calls whose names
// its callers choose) are balanced together at the service level, as are names
// the library cannot take (not UTF-8). A select never fails for a method name,
// as dubbo-go's never does, and a service's bindings stay bounded (the Java
// adapter's rule).
const maxMethodsPerService = 4096

// serviceLevel is the name the calls of methods past maxMethodsPerService are
// balanced under.
const serviceLevel = ""

// bindingFor returns the method's binding for set s, making it (and its
// balancer) when s is newer than the cached one. first is the call's first
// provider, whose URL carries the configuration, as in dubbo-go. locked: the
// caller holds mu.
func (st *serviceState) bindingFor(s *invokerSet, method string, first *common.URL, locked bool) (*binding, error) {
	cached, ok := st.bindings.Load(method)
	if ok {
		if b := cached.(*binding); b.gen == s.gen && b.first == first {
			return b, nil
		}
	} else if method != serviceLevel && st.methods.Load() >= maxMethodsPerService {
		return st.bindingFor(s, serviceLevel, first, locked)
	}
	mc, err := readMethodConfig(first, method, st.lb.strategy)
	if err != nil {
		return nil, err
	}
	if ok {
		// The same set through another URL object (a refresh's new objects, or
		// a second reference): its own parameters, usually the same ones.
		if b := cached.(*binding); b.gen == s.gen && b.config == mc.config && slices.Equal(b.hashArgs, mc.hashArgs) &&
			b.sequenced == mc.sequenced {
			moved := *b
			moved.first = first
			st.bindings.CompareAndSwap(method, b, &moved)
			return &moved, nil
		}
	}
	if !locked {
		st.mu.Lock()
		defer st.mu.Unlock()
	}
	if st.retired.Load() {
		return nil, polylb.ErrClosed // swept: the caller starts over
	}
	key := balancerKey{config: mc.config}
	if _, own := s.byMethod[method]; own && mc.weighted {
		key.weightsOf = method
	}
	bal, ok := st.balancers[key]
	if !ok {
		if bal, err = polylb.New(mc.config); err != nil {
			return nil, fmt.Errorf("polylb: bad configuration for %s.%s (%s): %w", st.serviceKey, method, mc.config, err)
		}
		if cur := st.set.Load(); cur != nil {
			if err := bal.Update(cur.weightsFor(key.weightsOf)); err != nil {
				return nil, fmt.Errorf("polylb: the providers of %s were rejected: %w", st.serviceKey, err)
			}
		}
		st.balancers[key] = bal
		st.publishBalancers()
	}
	id, err := bal.Method(method)
	if err != nil {
		if method != serviceLevel {
			return st.bindingFor(s, serviceLevel, first, true) // a name the library cannot take
		}
		return nil, fmt.Errorf("polylb: method %q of %s cannot be balanced: %w", method, st.serviceKey, err)
	}
	b := &binding{gen: s.gen, balancer: bal, method: id, hashArgs: mc.hashArgs, sequenced: mc.sequenced, first: first, config: mc.config}
	// A select still on an older set must not replace a newer set's binding:
	// closeUnbound would then close a balancer a method uses.
	if v, ok := st.bindings.Load(method); !ok || v.(*binding).gen <= s.gen {
		if !ok {
			st.methods.Add(1)
		}
		st.bindings.Store(method, b)
	}
	return b, nil
}

// retire closes the balancers (calls still running get a result or
// ErrClosed; their reports go nowhere).
func (st *serviceState) retire() {
	st.retired.Store(true)
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, b := range st.balancers {
		b.Close()
	}
}

// publishBalancers republishes the balancers for stats. Caller holds mu.
func (st *serviceState) publishBalancers() {
	list := make([]*polylb.Balancer, 0, len(st.balancers))
	for _, b := range st.balancers {
		list = append(list, b)
	}
	st.listed.Store(&list)
}

// Stats returns polylb's stats of every balancer of the state (one per
// distinct configuration), for diagnostics and tests. It takes no lock a
// select or a set change takes; a balancer closed meanwhile (its
// configuration no longer used, or the state swept) is left out, as the
// Java adapter does.
func (st *serviceState) stats() ([]polylb.Stats, error) {
	listed := st.listed.Load()
	if listed == nil {
		return nil, nil
	}
	var out []polylb.Stats
	for _, b := range *listed {
		s, err := b.Stats()
		if errors.Is(err, polylb.ErrClosed) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
