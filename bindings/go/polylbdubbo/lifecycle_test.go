package polylbdubbo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

func statsByAddress(t *testing.T, lbName, svc string) map[string]uint64 {
	t.Helper()
	stats, err := Get(lbName).Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, s := range stats {
		for _, inv := range s.Invokers {
			out[inv.Address] = inv.Selected
		}
	}
	return out
}

// Providers come and go (new Invoker objects, as a registry refresh makes):
// survivors keep their id and counters, a removed provider is never picked
// again and drops out of polylb's set, and nothing stays in flight.
func TestChurnKeepsSurvivorsAndDropsTheGone(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-leastactive"
	params := "loadbalance=" + lbName
	a := newProvider(t, svc, "10.0.0.1:20000", params)
	b := newProvider(t, svc, "10.0.0.2:20000", params)
	c := newProvider(t, svc, "10.0.0.3:20000", params)
	for i := 0; i < 300; i++ {
		call(clusterOf(t, "failover", wrapAll(a, b, c)), "sayHello")
	}
	before := statsByAddress(t, lbName, svc)
	st, _ := Get(lbName).services.Load(svc)
	idOf := func(addr string) uint64 {
		s := st.(*serviceState).set.Load()
		return s.ids[s.byKey["tri://"+addr+"/"+svc]]
	}
	idB := idOf("10.0.0.2:20000")

	// c leaves (its invoker destroyed, as a registry directory does), d
	// joins, and b's provider comes back as a new object (a refreshed URL).
	c.Destroy()
	b2 := newProvider(t, svc, "10.0.0.2:20000", params)
	d := newProvider(t, svc, "10.0.0.4:20000", params)
	ci := clusterOf(t, "failover", wrapAll(a, b2, d))
	for i := 0; i < 300; i++ {
		if addr := addrOf(call(ci, "sayHello")); addr == "10.0.0.3:20000" {
			t.Fatal("a removed provider was picked")
		}
	}
	after := statsByAddress(t, lbName, svc)
	if _, ok := after["10.0.0.3:20000"]; ok {
		t.Errorf("the removed provider is still in polylb's set: %v", after)
	}
	for _, addr := range []string{"10.0.0.1:20000", "10.0.0.2:20000"} {
		if after[addr] <= before[addr] {
			t.Errorf("%s: selected %d before the churn and %d after: its counters were not kept", addr, before[addr], after[addr])
		}
	}
	if idOf("10.0.0.2:20000") != idB {
		t.Errorf("the refreshed object of 10.0.0.2 got a new id")
	}
	if after["10.0.0.4:20000"] == 0 {
		t.Error("the new provider was never picked")
	}
	if c.calls.Load() == 0 || b2.calls.Load() == 0 {
		t.Error("test setup: every provider should have been called")
	}
	assertNoneInFlight(t, lbName, svc)
}

// A late call holding the previous objects (a list taken before the refresh)
// maps them to the same providers: no rebuild of the set, and the call gets
// an object of its own list.
func TestOldObjectsAreAliases(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	params := "loadbalance=" + lbName
	oldList := wrapAll(newProvider(t, svc, "10.0.0.1:20000", params), newProvider(t, svc, "10.0.0.2:20000", params))
	newList := wrapAll(newProvider(t, svc, "10.0.0.1:20000", params), newProvider(t, svc, "10.0.0.2:20000", params))
	lb := Get(lbName)
	lb.Select(oldList, newInvocation("m"))
	lb.Select(newList, newInvocation("m"))
	v, _ := lb.services.Load(svc)
	st := v.(*serviceState)
	gen := st.set.Load().gen
	for i := 0; i < 20; i++ {
		list := oldList
		if i%2 == 1 {
			list = newList
		}
		got := lb.Select(list, newInvocation("m"))
		if got != list[0] && got != list[1] {
			t.Fatalf("select returned %v, not an element of the call's list", got)
		}
	}
	if st.set.Load().gen != gen {
		t.Errorf("alternating old and new objects rebuilt the set (generation %d -> %d)", gen, st.set.Load().gen)
	}
}

// Failover: a provider that fails is retried elsewhere, never twice in one
// call; its failures are counted, every attempt is reported once.
func TestFailoverRetriesOtherProviders(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-random"
	params := "loadbalance=" + lbName + "&retries=2&polylb.config=seed%3D7"
	bad := newProvider(t, svc, "10.0.0.1:20000", params)
	bad.fn = func(ctx context.Context, inv base.Invocation) result.Result {
		return &result.RPCResult{Err: errors.New("connection refused")}
	}
	good1 := newProvider(t, svc, "10.0.0.2:20000", params)
	good2 := newProvider(t, svc, "10.0.0.3:20000", params)
	ci := clusterOf(t, "failover", wrapAll(bad, good1, good2))
	const n = 600
	for i := 0; i < n; i++ {
		before := bad.calls.Load()
		if res := call(ci, "sayHello"); res.Error() != nil {
			t.Fatalf("call %d failed: %v", i, res.Error())
		}
		if bad.calls.Load()-before > 1 {
			t.Fatal("one call tried the failing provider twice")
		}
	}
	stats, _ := Get(lbName).Stats(svc)
	badStats, _ := stats[0].Invoker(stats[0].Invokers[0].ID)
	if badStats.Address != "10.0.0.1:20000" {
		t.Fatalf("unexpected set order: %+v", stats[0].Invokers)
	}
	if int64(badStats.Failures) != bad.calls.Load() || badStats.Failures == 0 {
		t.Errorf("failures %d, calls to the failing provider %d", badStats.Failures, bad.calls.Load())
	}
	// A retry's select excludes what the call tried already: polylb never
	// picks the failing provider for a retry, so each of its picks was sent.
	if int64(badStats.Selected) != bad.calls.Load() {
		t.Errorf("the failing provider was picked %d times for %d calls: retries picked it again", badStats.Selected, bad.calls.Load())
	}
	// Roughly a third of the first attempts land on it (5 sigma).
	if got, lo, hi := bad.calls.Load(), int64(200-58), int64(200+58); got < lo || got > hi {
		t.Errorf("%d first attempts on the failing provider, want %d..%d", got, lo, hi)
	}
	assertNoneInFlight(t, lbName, svc)
}

// Picks dubbo-go never sends are released when the invocation ends: a pick of
// an unavailable provider (dubbo-go reselects), and a call a filter before
// polylb's refused.
func TestUnsentPicksDoNotStayInFlight(t *testing.T) {
	t.Run("reselect", func(t *testing.T) {
		svc := serviceName(t)
		const lbName = "polylb-leastactive"
		params := "loadbalance=" + lbName
		down := newProvider(t, svc, "10.0.0.1:20000", params)
		down.down.Store(true)
		up := newProvider(t, svc, "10.0.0.2:20000", params)
		ci := clusterOf(t, "failover", wrapAll(down, up))
		for i := 0; i < 200; i++ {
			if addr := addrOf(call(ci, "sayHello")); addr != "10.0.0.2:20000" {
				t.Fatalf("call sent to %s", addr)
			}
		}
		if down.calls.Load() != 0 {
			t.Fatal("the unavailable provider was called")
		}
		if statsByAddress(t, lbName, svc)["10.0.0.1:20000"] == 0 {
			t.Fatal("test setup: polylb never picked the unavailable provider, so nothing was released")
		}
		assertNoneInFlight(t, lbName, svc)
	})
	t.Run("refused before the filter", func(t *testing.T) {
		svc := serviceName(t)
		const lbName = "polylb-leastactive"
		lb := Get(lbName)
		invokers := wrapAll(newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName),
			newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName))
		// What the cluster interceptor sees: the cluster selects, and its
		// call is refused before it reaches polylb's filter.
		refusing := &clusterFunc{fn: func(ctx context.Context, inv base.Invocation) result.Result {
			lb.Select(invokers, inv)
			return &result.RPCResult{Err: errors.New("refused by a tps limiter")}
		}}
		for i := 0; i < 50; i++ {
			interceptor{}.Invoke(context.Background(), refusing, newInvocation("sayHello"))
		}
		assertNoneInFlight(t, lbName, svc)
	})
}

// clusterFunc stands for a cluster invoker whose Invoke is fn.
type clusterFunc struct {
	base.Invoker
	fn func(ctx context.Context, inv base.Invocation) result.Result
}

func (c *clusterFunc) Invoke(ctx context.Context, inv base.Invocation) result.Result {
	return c.fn(ctx, inv)
}

// While a call runs, its provider counts one call in flight; a call that
// dubbo-go sends without asking the LoadBalance (a lone provider) counts
// too, in the service's balancer.
func TestCallsAreInFlightWhileTheyRun(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-leastactive"
	params := "loadbalance=" + lbName
	a := newProvider(t, svc, "10.0.0.1:20000", params)
	b := newProvider(t, svc, "10.0.0.2:20000", params)
	var seen []int64
	probe := func(ctx context.Context, inv base.Invocation) result.Result {
		seen = append(seen, inFlight(t, lbName, svc)["10.0.0.1:20000"])
		return &result.RPCResult{Rest: "a"}
	}
	a.fn = probe
	both := wrapAll(a, b)
	for addrOf(call(clusterOf(t, "failover", both), "sayHello")) != "a" {
	}
	// A directory holding a alone: the cluster sends without a select.
	call(clusterOf(t, "failover", both[:1]), "sayHello")
	if fmt.Sprint(seen) != "[1 1]" {
		t.Errorf("calls in flight at a during its calls: %v, want [1 1]", seen)
	}
	assertNoneInFlight(t, lbName, svc)
}

// Goroutines call through the cluster while the provider list changes under
// them; afterwards nothing is in flight and every call succeeded.
func TestConcurrentCallsAndChurn(t *testing.T) {
	for _, strategy := range []string{"leastactive", "roundrobin", "consistenthash", "peakewma"} {
		t.Run(strategy, func(t *testing.T) {
			svc := serviceName(t)
			lbName := Name + "-" + strategy
			params := "loadbalance=" + lbName
			var ps []*provider
			for i := 1; i <= 6; i++ {
				ps = append(ps, newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i), params))
			}
			lists := [][]base.Invoker{wrapAll(ps[:4]...), wrapAll(ps[2:]...), wrapAll(ps...)}
			clusters := make([]base.Invoker, len(lists))
			for i, l := range lists {
				clusters[i] = clusterOf(t, "failover", l)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := 0; i < 400; i++ {
						ci := clusters[(g+i/50)%len(clusters)]
						if res := call(ci, fmt.Sprintf("m%d", i%3), fmt.Sprint(i)); res.Error() != nil {
							errs <- res.Error()
							return
						}
					}
				}(g)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			assertNoneInFlight(t, lbName, svc)
		})
	}
}

// Forking sends one invocation to several providers at once and returns the
// first answer: every fork is reported once, none stays in flight.
func TestForkingReportsEveryFork(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-leastactive"
	params := "loadbalance=" + lbName + "&forks=2"
	var ps []*provider
	for i := 1; i <= 4; i++ {
		p := newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i), params)
		p.fn = func(ctx context.Context, inv base.Invocation) result.Result {
			time.Sleep(time.Millisecond)
			return &result.RPCResult{Rest: "ok"}
		}
		ps = append(ps, p)
	}
	ci := clusterOf(t, "forking", wrapAll(ps...))
	for i := 0; i < 50; i++ {
		if res := call(ci, "sayHello"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	// The losing forks finish after the call returned: wait for them (a
	// fork never reported would keep this loop waiting until the deadline).
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var busy int64
		for _, n := range inFlight(t, lbName, svc) {
			busy += n
		}
		if busy == 0 {
			break
		}
	}
	assertNoneInFlight(t, lbName, svc)
	var calls int64
	for _, p := range ps {
		calls += p.calls.Load()
	}
	if calls != 100 {
		t.Errorf("%d provider calls for 50 calls with forks=2", calls)
	}
}

// States of services gone from the process (no select for a whole period, no
// provider available) are freed, so memory stays bounded as services churn.
func TestGoneServicesAreFreed(t *testing.T) {
	SetSweepPeriod(time.Millisecond)
	defer SetSweepPeriod(DefaultSweepPeriod)
	const lbName = "polylb-p2c"
	lb := Get(lbName)
	// This test's services only: the registry is the process's, and another
	// run's live service (go test -count) stays in it.
	gone := serviceName(t) + ".S"
	count := func() (n int) {
		lb.services.Range(func(k, _ any) bool {
			if strings.Contains(k.(string), gone) {
				n++
			}
			return true
		})
		return n
	}
	for i := 0; i < 200; i++ {
		svc := fmt.Sprintf("%s%d", gone, i)
		ps := []*provider{newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName),
			newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName)}
		call(clusterOf(t, "failover", wrapAll(ps...)), "sayHello")
		for _, p := range ps {
			p.Destroy() // the reference is destroyed
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n := count(); n > 10 {
		t.Errorf("%d service states kept for 200 services that came and went", n)
	}
	// A service still in use is never freed.
	svc := serviceName(t) + ".Live"
	ci := clusterOf(t, "failover", wrapAll(newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName),
		newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName)))
	for i := 0; i < 20; i++ {
		call(ci, "sayHello")
		lb.lookup(fmt.Sprintf("%s.other%d", svc, i)) // new states trigger sweeps
		time.Sleep(2 * time.Millisecond)
	}
	if stats, _ := lb.Stats(svc); len(stats) != 1 || stats[0].Invokers[0].Selected+stats[0].Invokers[1].Selected != 20 {
		t.Errorf("the live service lost its state: %+v", stats)
	}
}

// A configuration that providers' URLs no longer give (here hash.nodes,
// changed with every set) has its balancer closed at a set change a sweep
// period after no method used it: a service keeps the balancers its methods
// use, not one per value ever read. Calls made meanwhile from other
// goroutines, some on a balancer being closed, never fail.
func TestBalancersOfConfigurationsNoLongerReadAreClosed(t *testing.T) {
	SetSweepPeriod(time.Millisecond)
	defer SetSweepPeriod(DefaultSweepPeriod)
	svc := serviceName(t)
	const lbName = Name + "-consistenthash"
	var current atomic.Pointer[base.Invoker]
	next := func(round int) {
		params := fmt.Sprintf("loadbalance=%s&hash.nodes=%d", lbName, 160+4*round)
		ci := clusterOf(t, "failover", wrapAll(
			newProvider(t, svc, fmt.Sprintf("10.0.0.1:%d", 20000+round), params),
			newProvider(t, svc, fmt.Sprintf("10.0.0.2:%d", 20000+round), params)))
		current.Store(&ci)
	}
	next(0)
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if res := call(*current.Load(), "sayHello", fmt.Sprint(i)); res.Error() != nil {
					errs <- res.Error()
					return
				}
			}
		}()
	}
	for round := 1; round <= 40; round++ {
		time.Sleep(2 * time.Millisecond)
		next(round)
		call(*current.Load(), "sayHello", "k")
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Two more set changes with no call racing them: a goroutine that lagged
	// rounds behind (a loaded machine) may have made balancers for old values
	// after the last change; the first change finds them unbound, the second
	// closes them.
	for round := 41; round <= 42; round++ {
		time.Sleep(2 * time.Millisecond)
		next(round)
		call(*current.Load(), "sayHello", "k")
	}
	v, _ := Get(lbName).services.Load(svc)
	st := v.(*serviceState)
	st.mu.Lock()
	n := len(st.balancers)
	st.mu.Unlock()
	// The one in use, the one before it (held until this last change) and the
	// one before that (found unbound at this change, closed at the next).
	if n > 3 {
		t.Errorf("%d balancers kept for 43 values of hash.nodes", n)
	}
	assertNoneInFlight(t, lbName, svc)
}

// A select that loaded an older set before a set change makes its binding
// for that set without replacing the newer set's binding of the method.
func TestAnOlderSetsBindingDoesNotReplaceANewerOne(t *testing.T) {
	svc := serviceName(t)
	const lbName = Name + "-random"
	params := "loadbalance=" + lbName
	a := newProvider(t, svc, "10.0.0.1:20000", params)
	b := newProvider(t, svc, "10.0.0.2:20000", params)
	c := newProvider(t, svc, "10.0.0.3:20000", params)
	call(clusterOf(t, "failover", wrapAll(a, b)), "sayHello")
	call(clusterOf(t, "failover", wrapAll(a, b, c)), "sayHello") // a set change
	v, _ := Get(lbName).services.Load(svc)
	st := v.(*serviceState)
	current := st.set.Load()
	older := *current
	older.gen = current.gen - 1
	got, err := st.bindingFor(&older, "sayHello", a.GetURL(), false)
	if err != nil || got.gen != older.gen {
		t.Fatalf("binding for the older set: %+v, %v", got, err)
	}
	if kept, _ := st.bindings.Load("sayHello"); kept.(*binding).gen != current.gen {
		t.Errorf("the method's binding is now of generation %d, not the current %d", kept.(*binding).gen, current.gen)
	}
}
