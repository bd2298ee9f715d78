// Package polylbdubbo makes polylb a drop-in LoadBalance of apache/dubbo-go
// v3: importing it registers the extensions "polylb" (strategy from the URL
// parameter polylb.strategy) and "polylb-<strategy>" for every polylb
// strategy, the consumer filter "polylb" that reports each call's latency and
// outcome, and a cluster interceptor that releases picks dubbo-go never sent.
// See README.md.
package polylbdubbo

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	clusterpkg "dubbo.apache.org/dubbo-go/v3/cluster/cluster"
	"dubbo.apache.org/dubbo-go/v3/cluster/loadbalance"
	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Name is the generic extension's name, and the prefix of the others
// ("polylb-roundrobin", …).
const Name = "polylb"

// LoadBalance is one registered extension. dubbo-go asks its registry for a
// LoadBalance on every invocation (extension.GetLoadbalance calls the
// factory each time), so each name has one LoadBalance for the process and
// all state hangs off it, per service.
type LoadBalance struct {
	name     string
	strategy string // "" for "polylb": read from polylb.strategy

	services sync.Map // service key -> *serviceState
	// last caches the state of the last first-provider URL seen: a service's
	// calls then skip building its service key (a string) per call.
	last atomic.Pointer[lastState]
}

type lastState struct {
	url      *common.URL
	clusters bool
	st       *serviceState
}

var (
	byName = map[string]*LoadBalance{} // written by init only
	// all lists the extensions in a fixed order, for the sweep.
	all []*LoadBalance
)

func init() {
	register(Name, "")
	for _, s := range Strategies {
		register(Name+"-"+s, s)
	}
	registerFilter()
}

func register(name, strategy string) {
	lb := &LoadBalance{name: name, strategy: strategy}
	byName[name] = lb
	all = append(all, lb)
	extension.SetLoadbalance(name, func() loadbalance.LoadBalance { return lb })
}

// Get returns the registered extension of that name ("polylb",
// "polylb-leastactive", …), or nil.
func Get(name string) *LoadBalance { return byName[name] }

// Stats returns polylb's view of a service (dubbo-go's service key,
// e.g. "com.example.Greeter" or "group/com.example.Greeter:1.0"; the
// registries of a multi-registry reference, when polylb chooses among them:
// "registries of com.example.Greeter"; the groups of a multi-group reference:
// "groups of com.example.Greeter:1.0"): one
// document per balancer (one per distinct configuration, and one per method
// that providers weigh on its own), with each provider's weight, calls in
// flight and counters. nil for a service this extension has not balanced.
func (lb *LoadBalance) Stats(serviceKey string) ([]polylb.Stats, error) {
	v, ok := lb.services.Load(serviceKey)
	if !ok {
		return nil, nil
	}
	return v.(*serviceState).stats()
}

// state returns the state of the service first belongs to, creating it.
func (lb *LoadBalance) state(first *common.URL) *serviceState {
	return lb.stateOf(first, false)
}

// stateOf returns the state of a list whose first live URL is first,
// creating it; clusters: the list holds cluster invokers (see stateKey). A
// group's cluster invoker has its first provider's URL object, so the cache
// tells the two apart by clusters too.
func (lb *LoadBalance) stateOf(first *common.URL, clusters bool) *serviceState {
	if c := lb.last.Load(); c != nil && c.url == first && c.clusters == clusters && !c.st.retired.Load() {
		return c.st
	}
	st := lb.lookup(stateKey(first, clusters))
	lb.last.Store(&lastState{url: first, clusters: clusters, st: st})
	return st
}

// registriesPrefix marks the state of a multi-registry reference's
// registries, groupsPrefix that of a multi-group reference's groups (see
// stateKey).
const (
	registriesPrefix = "registries of "
	groupsPrefix     = "groups of "
)

// isClusterInvoker: inv is a cluster invoker, as every dubbo-go cluster's
// Join returns it (BuildInterceptorChain wraps it in InterceptorInvokers,
// and this package's interceptor is registered, so there is always one). A
// provider invoker is a protocol's, wrapped in filters, never this.
func isClusterInvoker(inv base.Invoker) bool {
	_, ok := inv.(*clusterpkg.InterceptorInvoker)
	return ok
}

// stateKey names the state a list belongs to: the service's key. A list of
// registries (dubbo-go's zoneAware cluster choosing among a multi-registry
// reference's registries, when a registry's URL names polylb) holds invokers
// whose URLs are the registries', with the reference's URL as their SubURL:
// their state is the reference's own, or every service using the same
// registries would share one state, whose set then flips between the
// services' invokers. A list of other cluster invokers (clusters) is a
// multi-group reference's (group "*" or "a,b": RegistryDirectory's
// toGroupInvokers joins each group's providers into a cluster invoker whose
// URL is the group's first provider's, URL object and all): its state is the
// groups' of the interface and version, "groups of <interface:version>",
// whose members are the groups (see serviceState.memberKey). Keyed by that
// URL, the groups' select went into the first group's state, where group A's
// cluster invoker took its first provider's id, and that provider never
// received a call. The Java adapter keys any cluster invokers' list apart
// likewise ("registry-level:").
func stateKey(u *common.URL, clusters bool) string {
	if u.SubURL != nil {
		if key := u.SubURL.ServiceKey(); key != "" {
			return registriesPrefix + key
		}
	}
	if clusters {
		return groupsPrefix + common.ServiceKey(u.GetParam(constant.InterfaceKey, strings.TrimPrefix(u.Path, "/")),
			"", u.GetParam(constant.VersionKey, ""))
	}
	return u.ServiceKey()
}

func (lb *LoadBalance) lookup(serviceKey string) *serviceState {
	for {
		if v, ok := lb.services.Load(serviceKey); ok {
			if st := v.(*serviceState); !st.retired.Load() {
				return st
			}
			continue // being swept: the sweep deletes it next
		}
		maybeSweep()
		st := newServiceState(lb, serviceKey)
		if v, loaded := lb.services.LoadOrStore(serviceKey, st); loaded {
			st = v.(*serviceState)
		}
		if !st.retired.Load() {
			return st
		}
	}
}

// Select picks one of invokers for the invocation (dubbo-go's LoadBalance).
//
// For a configuration polylb rejects (an unknown polylb.strategy, a bad
// hash.nodes, hash.arguments or polylb.config) it returns an invoker whose
// every call fails with the error, which names the parameter (see
// selectFailure).
func (lb *LoadBalance) Select(invokers []base.Invoker, inv base.Invocation) base.Invoker {
	if len(invokers) == 0 {
		return nil
	}
	// A list taken before a registry refresh may hold invokers destroyed
	// since, whose URL dubbo-go has dropped: the configuration comes from
	// the first live one.
	first := invokers[0].GetURL()
	for i := 1; first == nil && i < len(invokers); i++ {
		first = invokers[i].GetURL()
	}
	if first == nil {
		return invokers[0] // all destroyed: the protocol refuses the call
	}
	clusters := isClusterInvoker(invokers[0])
	for {
		st := lb.stateOf(first, clusters)
		if !st.used.Load() {
			st.used.Store(true) // a load first: no write per call once set
		}
		chosen, err := st.selectFrom(invokers, first, inv)
		if err == nil {
			return chosen
		}
		if !errors.Is(err, polylb.ErrClosed) || !st.retired.Load() {
			return newSelectFailure(first, err)
		}
		// The state was swept between the lookup and the select: start over.
	}
}

// errRetry says the set changed under a select: try again.
var errRetry = errors.New("polylb: set changed")

// maxRacyAttempts is how many selects may lose a race with a set change
// before the rest are made under the state's lock (where the set cannot
// change), so a select never fails for losing races.
const maxRacyAttempts = 3

func (st *serviceState) selectFrom(invokers []base.Invoker, first *common.URL, inv base.Invocation) (base.Invoker, error) {
	for attempt := 0; ; attempt++ {
		var chosen base.Invoker
		var err error
		if attempt < maxRacyAttempts {
			chosen, err = st.attempt(invokers, first, inv, false)
		} else {
			st.mu.Lock()
			chosen, err = st.attempt(invokers, first, inv, true)
			st.mu.Unlock()
		}
		if err != errRetry {
			return chosen, err
		}
		if attempt > maxRacyAttempts+3 {
			return nil, fmt.Errorf("polylb: the providers of %s kept changing during select", st.serviceKey)
		}
	}
}

// candidatePool holds the candidate buffers of selects among lists longer
// than attempt's stack buffer (*[]uint64).
var candidatePool = sync.Pool{New: func() any { return new([]uint64) }}

// attempt is one try of a select; errRetry when the set changed meanwhile.
// locked: the caller holds st.mu.
func (st *serviceState) attempt(invokers []base.Invoker, first *common.URL, inv base.Invocation, locked bool) (base.Invoker, error) {
	s := st.set.Load()
	var buf [64]uint64
	candidates := buf[:0]
	full := s != nil && s.sameMembers(invokers)
	if !full && s != nil && len(invokers) > len(buf) {
		// A subset (a router's) or another reference's objects of a large
		// set: a pooled buffer, not one grown by doubling per call (25 KB a
		// call at 1,000 providers).
		p := candidatePool.Get().(*[]uint64)
		if cap(*p) < len(invokers) {
			*p = make([]uint64, 0, len(invokers))
		}
		candidates = (*p)[:0]
		defer candidatePool.Put(p)
	}
	if !full {
		if s != nil {
			for _, ivk := range invokers {
				pos, ok := s.position(ivk)
				if !ok {
					if destroyed(ivk) {
						continue // never a member again, and not callable
					}
					s = nil // a provider (or object) the set does not know
					break
				}
				if ivk != s.members[pos] && destroyed(s.members[pos]) {
					// The member is an object a refresh destroyed, kept while
					// its replacement (this one) was connecting: the set still
					// has its parameters (weights). Rebuild once, around this.
					s = nil
					break
				}
				candidates = append(candidates, s.ids[pos])
			}
			if s != nil && len(candidates) == 0 {
				return invokers[0], nil // none callable: no pick to make
			}
		}
		if s == nil {
			if !locked {
				st.mu.Lock()
				defer st.mu.Unlock()
			}
			if err := st.cover(invokers); err != nil {
				return nil, err
			}
			return nil, errRetry
		}
		// Also every pruneEvery-th subset select: a provider that leaves while
		// the directory's list has a size a routed subset had before would
		// otherwise stay a member until a provider joins.
		n := int64(len(invokers))
		if (st.lastSubset.Swap(n) != n || st.subsetSelects.Add(1)%pruneEvery == 0) && !locked {
			if err := st.pruneIfDestroyed(s, invokers); err != nil {
				return nil, err
			}
			if st.set.Load() != s {
				return nil, errRetry
			}
		}
	}
	method := inv.ActualMethodName()
	b, err := st.bindingFor(s, method, first, locked)
	if err != nil {
		return nil, err
	}
	var key []byte
	if b.hashArgs != nil {
		key = hashKey(inv, b.hashArgs)
	}
	ps := picksOf(inv, true)
	var exBuf [8]uint64
	excluded := ps.excluded(st, exBuf[:0])
	var id uint64
	if full && len(excluded) == 0 {
		id, err = b.balancer.Select(b.method, key)
	} else {
		var cands []uint64
		if !full {
			cands = candidates
		}
		if b.sequenced && ps.pendingIn(st) {
			// Round robin, a call with a pick still out (forking's next
			// fork): a select that skips the picked providers advances only
			// the others' turns, and with 2 forks over 3 providers one of
			// them got every call. dubbo-go's DoSelect selects over the list
			// and reselects only when that lands on a picked one: do the
			// same, undoing that pick. (A failover retry, whose tried pick
			// has ended, keeps the exclusion: the failed provider's turns
			// are not spent on its retries.)
			if full {
				id, err = b.balancer.Select(b.method, key)
			} else {
				id, err = b.balancer.SelectAmong(b.method, key, cands, nil)
			}
			if err == nil && slices.Contains(excluded, id) {
				_ = b.balancer.Report(b.method, id, 0, polylb.Cancelled)
				id, err = b.balancer.SelectAmong(b.method, key, cands, excluded)
			}
		} else {
			id, err = b.balancer.SelectAmong(b.method, key, cands, excluded)
		}
		if errors.Is(err, polylb.ErrNoCandidate) {
			// Every candidate was tried already (more retries than
			// providers): pick among all, as dubbo-go's reselect ends up
			// returning a tried one.
			id, err = b.balancer.SelectAmong(b.method, key, cands, nil)
		}
	}
	if err != nil {
		if errors.Is(err, polylb.ErrUnknownCandidate) || errors.Is(err, polylb.ErrNoProvider) {
			return nil, errRetry // the balancer holds another set than s
		}
		if errors.Is(err, polylb.ErrClosed) && !st.retired.Load() {
			return nil, errRetry // an older binding's balancer, closed (closeUnbound)
		}
		return nil, fmt.Errorf("polylb could not select a provider for %s.%s: %w", st.serviceKey, method, err)
	}
	chosen, pos := chosenInvoker(s, invokers, id, full)
	if chosen == nil {
		// The balancer moved to a newer set between our load of s and the
		// select: undo the pick and start over.
		_ = b.balancer.Report(b.method, id, 0, polylb.Cancelled)
		return nil, errRetry
	}
	if !endsAreSeen(inv) {
		// No cluster interceptor will end this invocation (a cluster not
		// built by dubbo-go's BuildInterceptorChain, a caller driving the
		// LoadBalance by hand, failback's timer re-running an ended
		// invocation): nothing would release an unsent pick, so it is undone
		// at once. The filter counts the call if it is sent.
		_ = b.balancer.Report(b.method, id, 0, polylb.Cancelled)
		return chosen, nil
	}
	p := ps.newPick()
	*p = pick{st: st, balancer: b.balancer, method: b.method, id: id, url: chosen.GetURL(), key: s.keys[pos]}
	if st.groups {
		// A group's URL is its first provider's object: the filter of that
		// provider must find its own pick, never this one (released when the
		// call ends, as registries' are: the providers' calls are reported).
		p.url = nil
	}
	if evicted := ps.add(p); evicted != nil {
		evicted.report(polylb.Cancelled)
	}
	return chosen, nil
}

// chosenInvoker maps the balancer's id to the call's own object: the member
// when the list is the set, else the list's element for that provider (the
// list may hold an older object of it). nil when id is not in the list.
func chosenInvoker(s *invokerSet, invokers []base.Invoker, id uint64, full bool) (base.Invoker, int) {
	pos, ok := s.byID[id]
	if !ok {
		return nil, 0
	}
	if full {
		return s.members[pos], pos
	}
	for _, ivk := range invokers {
		if p, ok := s.position(ivk); ok && p == pos {
			return ivk, pos
		}
	}
	return nil, 0
}
