package polylbgrpc

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
)

// assertSubsetServes dials 6 ready servers with the polylb config string
// config (a subset of 2), sends 600 RPCs and asserts that every stats row
// has an in_subset entry, that the balancer marks 2 in_subset, and that the
// RPCs went to exactly those 2, both serving.
func assertSubsetServes(t *testing.T, config string) {
	t.Helper()
	var endpoints []resolver.Endpoint
	var addrs []string
	for i := 0; i < 6; i++ {
		p := startProvider(t)
		addrs = append(addrs, p.addr)
		endpoints = append(endpoints, endpointOf(p.addr))
	}
	cl := dial(t, config, endpoints)
	cl.waitReady(t, addrs...)
	got := map[string]int{}
	for i := 0; i < 600; i++ {
		host, err := unary(context.Background(), cl, codes.OK, 0)
		if err != nil {
			t.Fatal(err)
		}
		got[host]++
	}
	var marked []string
	for _, inv := range cl.stats(t).Invokers {
		raw, ok := inv.Extra["in_subset"]
		if !ok {
			t.Fatalf("%s: no in_subset in its stats row", inv.Address)
		}
		if string(raw) == "true" {
			marked = append(marked, inv.Address)
		}
	}
	sort.Strings(marked)
	called := make([]string, 0, len(got))
	for host := range got {
		called = append(called, host)
	}
	sort.Strings(called)
	if len(marked) != 2 || fmt.Sprint(marked) != fmt.Sprint(called) {
		t.Errorf("RPCs went to %v, stats mark %v in_subset: want the same 2", got, marked)
	}
}

// Subsetting through the service config's polylb config string: with
// subset.size=2&subset.key=c1 every RPC over 6 ready servers goes to the 2
// the balancer marks in_subset, and both serve.
func TestSubsetFromTheConfigString(t *testing.T) {
	assertSubsetServes(t, "loadbalance=leastactive&seed=3&subset.size=2&subset.key=c1")
}

// Subsets dealt by index through the config string: random takes them
// (subset.size=2&subset.index=3), and every RPC over 6 ready servers goes to
// the 2 the balancer marks in_subset, both serving.
func TestSubsetByIndexFromTheConfigString(t *testing.T) {
	assertSubsetServes(t, "loadbalance=random&seed=3&subset.size=2&subset.index=3")
}
