package polylbdubbo

import (
	"fmt"
	"testing"
)

// Providers that are unavailable for a while (the dubbo protocol's invoker
// while its connection is down), not destroyed: dubbo-go's reselect hands the
// LoadBalance lists without them, of shrinking sizes, call after call. The
// set is not rebuilt per call, and the unavailable providers keep their ids
// (their counters and calls in flight) for when they come back.
func TestUnavailableProvidersKeepTheirIDs(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	params := "loadbalance=" + lbName
	var ps []*provider
	for i := 1; i <= 4; i++ {
		ps = append(ps, newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i), params))
	}
	ci := clusterOf(t, "failover", wrapAll(ps...))
	call(ci, "sayHello")
	v, _ := Get(lbName).services.Load(svc)
	st := v.(*serviceState)
	ids := func() string {
		s := st.set.Load()
		return fmt.Sprint(s.ids)
	}
	before, gen := ids(), st.set.Load().gen
	ps[0].down.Store(true)
	ps[1].down.Store(true)
	downCalls := ps[0].calls.Load() + ps[1].calls.Load()
	for i := 0; i < 100; i++ {
		if res := call(ci, "sayHello"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	if ps[0].calls.Load()+ps[1].calls.Load() != downCalls {
		t.Fatal("an unavailable provider was called")
	}
	if after := ids(); after != before {
		t.Errorf("ids %s became %s while two providers were unavailable", before, after)
	}
	if g := st.set.Load().gen; g > gen+2 {
		t.Errorf("100 calls rebuilt the set %d times", g-gen)
	}
	assertNoneInFlight(t, lbName, svc)
}
