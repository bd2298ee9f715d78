package polylbdubbo

import (
	"context"
	"errors"
	"testing"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

// A provider leaves the registry while a call to it runs: dubbo-go destroys
// its invoker, which drops the invoker's URL, before the call returns. The
// call is reported from the pick it was sent for (not looked up by the URL,
// which is gone), and nothing stays in flight.
func TestInvokerDestroyedDuringTheCall(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-leastactive"
	// No retry: dubbo-go's failover would retry over the same static list,
	// which still holds the destroyed invoker (a registry's would not), and
	// panic itself on its nil URL.
	params := "loadbalance=" + lbName + "&retries=0"
	a := newProvider(t, svc, "10.0.0.1:20000", params)
	b := newProvider(t, svc, "10.0.0.2:20000", params)
	leaving := func(p *provider) func(context.Context, base.Invocation) result.Result {
		return func(context.Context, base.Invocation) result.Result {
			p.Destroy() // the registry's refresh, meanwhile
			return &result.RPCResult{Err: errors.New("connection reset")}
		}
	}
	a.fn, b.fn = leaving(a), leaving(b)
	res := call(clusterOf(t, "failover", wrapAll(a, b)), "sayHello")
	if res.Error() == nil {
		t.Fatal("the call succeeded")
	}
	assertNoneInFlight(t, lbName, svc)
}

// A call that took the provider list before a registry refresh selects after
// it, when the replaced invoker is destroyed (its URL dropped) and the set
// has moved on: the destroyed invoker is never picked, and nothing panics.
func TestLateListWithADestroyedInvoker(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	params := "loadbalance=" + lbName
	lb := Get(lbName)
	b := withFilters(newProvider(t, svc, "10.0.0.2:20000", params))
	a1p := newProvider(t, svc, "10.0.0.1:20000", params)
	a1 := withFilters(a1p)
	before := []base.Invoker{b, a1} // the late call's list
	lb.Select(before, newInvocation("m"))
	// The refresh: a new object for 10.0.0.1, the old one destroyed.
	a2 := withFilters(newProvider(t, svc, "10.0.0.1:20000", params))
	a1p.Destroy()
	lb.Select([]base.Invoker{b, a2}, newInvocation("m"))
	for i := 0; i < 4; i++ {
		if got := lb.Select(before, newInvocation("m")); got != b {
			t.Fatalf("select %d returned %v, want the live invoker", i, got)
		}
		// A reselect list whose first invoker is the destroyed one.
		if got := lb.Select([]base.Invoker{a1, b}, newInvocation("m")); got != b {
			t.Fatalf("select %d returned %v, want the live invoker", i, got)
		}
	}
}

// A provider that leaves while the directory's list has a size that a routed
// subset had before is still dropped: the check for destroyed members also
// runs every pruneEvery selects among subsets (before, only when a subset of a
// new size came, so a service that only shrank kept its dead members).
func TestAProviderLeavingAtASubsetsSizeIsDropped(t *testing.T) {
	lb := Get("polylb-roundrobin")
	service := serviceName(t)
	ps := []*provider{newProvider(t, service, "10.0.0.1:20000", ""),
		newProvider(t, service, "10.0.0.2:20000", ""), newProvider(t, service, "10.0.0.3:20000", "")}
	all := wrapAll(ps...)
	inv := newInvocation("m")
	lb.Select(all, inv)
	lb.Select(all[:2], inv) // a routed subset of two
	st := lb.state(all[0].GetURL())
	all[2].Destroy()
	for i := 0; i < 2*pruneEvery; i++ {
		if chosen := lb.Select(all[:2], inv); chosen != all[0] && chosen != all[1] {
			t.Fatalf("select %d: %v", i, chosen)
		}
	}
	if n := len(st.set.Load().members); n != 2 {
		t.Errorf("%d members after the third provider left, want 2", n)
	}
}
