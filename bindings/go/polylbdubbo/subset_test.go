package polylbdubbo

import (
	"fmt"
	"sort"
	"testing"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Subsetting through the URL's polylb.config: a consumer whose reference
// carries polylb.config=subset.size=2&subset.key=c1 (set as a parameter, as
// client.WithParam does: dubbo-go's common.NewURL unescapes a whole URL
// string before splitting it, so a %26 there would split the value) sends
// every call to 2 of 8 providers,
// the 2 its balancer marks in_subset, and they are the addresses a plain
// polylb balancer with that key picks over the same addresses (the adapter
// passes the config and the addresses unchanged; the ids do not matter).
func TestSubsetFromPolylbConfig(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-leastactive"
	const extra = "seed=9&subset.size=2&subset.key=c1"
	var ps []*provider
	var plain []polylb.Invoker
	for i := 1; i <= 8; i++ {
		addr := fmt.Sprintf("10.0.0.%d:20000", i)
		p := newProvider(t, svc, addr, "loadbalance="+lbName)
		p.GetURL().SetParam(ConfigKey, extra)
		ps = append(ps, p)
		plain = append(plain, polylb.NewInvoker(uint64(100+i), addr))
	}
	ci := clusterOf(t, "failover", wrapAll(ps...))
	called := map[string]int{}
	for i := 0; i < 2000; i++ {
		res := call(ci, "sayHello")
		if res.Error() != nil {
			t.Fatal(res.Error())
		}
		called[addrOf(res)]++
	}

	stats, err := Get(lbName).Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	marked := map[string]bool{}
	for _, s := range stats {
		for _, inv := range s.Invokers {
			if string(inv.Extra["in_subset"]) == "true" {
				marked[inv.Address] = true
			}
		}
	}
	var calledAddrs, markedAddrs []string
	for a := range called {
		calledAddrs = append(calledAddrs, a)
	}
	for a := range marked {
		markedAddrs = append(markedAddrs, a)
	}
	sort.Strings(calledAddrs)
	sort.Strings(markedAddrs)
	if len(calledAddrs) != 2 || fmt.Sprint(calledAddrs) != fmt.Sprint(markedAddrs) {
		t.Fatalf("calls went to %v, stats mark %v in_subset: want the same 2", called, markedAddrs)
	}

	lb, err := polylb.New("loadbalance=leastactive&subset.size=2&subset.key=c1")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if err := lb.Update(plain); err != nil {
		t.Fatal(err)
	}
	s, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, inv := range s.Invokers {
		if string(inv.Extra["in_subset"]) == "true" {
			want = append(want, inv.Address)
		}
	}
	sort.Strings(want)
	if fmt.Sprint(want) != fmt.Sprint(calledAddrs) {
		t.Errorf("the adapter's subset %v, a plain balancer's with the same key and addresses %v", calledAddrs, want)
	}
	assertNoneInFlight(t, lbName, svc)
}

// Subsets dealt by index through the URL's polylb.config: a polylb-random
// consumer whose reference carries
// polylb.config=subset.size=2&subset.index=1 (random takes subsets by index,
// as they hold every provider equally often over the consumers) sends every
// call to the 2 of 8 providers its balancer marks in_subset, the addresses a
// plain polylb balancer with that index marks over the same addresses.
func TestSubsetByIndexFromPolylbConfig(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-random"
	const extra = "seed=9&subset.size=2&subset.index=1"
	var ps []*provider
	var plain []polylb.Invoker
	for i := 1; i <= 8; i++ {
		addr := fmt.Sprintf("10.0.0.%d:20000", i)
		p := newProvider(t, svc, addr, "loadbalance="+lbName)
		p.GetURL().SetParam(ConfigKey, extra)
		ps = append(ps, p)
		plain = append(plain, polylb.NewInvoker(uint64(100+i), addr))
	}
	ci := clusterOf(t, "failover", wrapAll(ps...))
	called := map[string]int{}
	for i := 0; i < 2000; i++ {
		res := call(ci, "sayHello")
		if res.Error() != nil {
			t.Fatal(res.Error())
		}
		called[addrOf(res)]++
	}
	stats, err := Get(lbName).Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	var calledAddrs, markedAddrs []string
	for a := range called {
		calledAddrs = append(calledAddrs, a)
	}
	for _, s := range stats {
		for _, inv := range s.Invokers {
			if string(inv.Extra["in_subset"]) == "true" {
				markedAddrs = append(markedAddrs, inv.Address)
			}
		}
	}
	sort.Strings(calledAddrs)
	sort.Strings(markedAddrs)
	if len(calledAddrs) != 2 || fmt.Sprint(calledAddrs) != fmt.Sprint(markedAddrs) {
		t.Fatalf("calls went to %v, stats mark %v in_subset: want the same 2", called, markedAddrs)
	}

	lb, err := polylb.New("loadbalance=random&subset.size=2&subset.index=1")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if err := lb.Update(plain); err != nil {
		t.Fatal(err)
	}
	s, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, inv := range s.Invokers {
		if string(inv.Extra["in_subset"]) == "true" {
			want = append(want, inv.Address)
		}
	}
	sort.Strings(want)
	if fmt.Sprint(want) != fmt.Sprint(calledAddrs) {
		t.Errorf("the adapter's subset %v, a plain balancer's with the same index and addresses %v", calledAddrs, want)
	}
	assertNoneInFlight(t, lbName, svc)
}
