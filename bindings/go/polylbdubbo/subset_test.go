package polylbdubbo

import (
	"fmt"
	"sort"
	"testing"

	polylb "github.com/polylb/polylb/bindings/go"
)

// sortedKeys is m's keys in order.
func sortedKeys(m map[string]int) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// markedInSubset is the addresses of the rows in stats whose in_subset is
// true, in order (an address marked in two rows is listed twice).
func markedInSubset(stats ...polylb.Stats) []string {
	var marked []string
	for _, s := range stats {
		for _, inv := range s.Invokers {
			if string(inv.Extra["in_subset"]) == "true" {
				marked = append(marked, inv.Address)
			}
		}
	}
	sort.Strings(marked)
	return marked
}

// assertSubsetFromPolylbConfig starts 8 providers of a fresh service at
// 10.0.0.1..8:20000 whose URLs name lbName and carry polylb.config=extra (set
// as a parameter, as client.WithParam does: dubbo-go's common.NewURL
// unescapes a whole URL string before splitting it, so a %26 there would
// split the value), makes 2000 calls through a failover cluster, and asserts
// they all went to the same 2 providers the adapter's stats mark in_subset,
// which are the addresses a plain polylb balancer built from plainConfig
// marks over the same addresses (the adapter passes the config and the
// addresses unchanged; the ids do not matter). chosenBy names what picks
// the subset ("key", "index") in the failure message.
func assertSubsetFromPolylbConfig(t *testing.T, lbName, extra, plainConfig, chosenBy string) {
	t.Helper()
	svc := serviceName(t)
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
	calledAddrs, markedAddrs := sortedKeys(called), markedInSubset(stats...)
	if len(calledAddrs) != 2 || fmt.Sprint(calledAddrs) != fmt.Sprint(markedAddrs) {
		t.Fatalf("calls went to %v, stats mark %v in_subset: want the same 2", called, markedAddrs)
	}

	lb, err := polylb.New(plainConfig)
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
	if want := markedInSubset(s); fmt.Sprint(want) != fmt.Sprint(calledAddrs) {
		t.Errorf("the adapter's subset %v, a plain balancer's with the same %s and addresses %v", calledAddrs, chosenBy, want)
	}
	assertNoneInFlight(t, lbName, svc)
}

// Subsetting through the URL's polylb.config: a consumer whose reference
// carries polylb.config=subset.size=2&subset.key=c1 sends every call to 2 of
// 8 providers, the 2 its balancer marks in_subset, and they are the
// addresses a plain polylb balancer with that key picks over the same
// addresses.
func TestSubsetFromPolylbConfig(t *testing.T) {
	assertSubsetFromPolylbConfig(t, "polylb-leastactive", "seed=9&subset.size=2&subset.key=c1",
		"loadbalance=leastactive&subset.size=2&subset.key=c1", "key")
}

// Subsets dealt by index through the URL's polylb.config: a polylb-random
// consumer whose reference carries
// polylb.config=subset.size=2&subset.index=1 (random takes subsets by index,
// as they hold every provider equally often over the consumers) sends every
// call to the 2 of 8 providers its balancer marks in_subset, the addresses a
// plain polylb balancer with that index marks over the same addresses.
func TestSubsetByIndexFromPolylbConfig(t *testing.T) {
	assertSubsetFromPolylbConfig(t, "polylb-random", "seed=9&subset.size=2&subset.index=1",
		"loadbalance=random&subset.size=2&subset.index=1", "index")
}
