package polylbdubbo

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// polylb-orca through a failover cluster: once the providers' load reports
// count (orca.blackoutMs=0 here), the calls follow the reported capacities,
// 1 : 2 : 3, where the configured weights (all 100) dealt them equally.
func TestOrcaFollowsReportedLoadsThroughTheCluster(t *testing.T) {
	svc := serviceName(t)
	const lbName = Name + "-orca"
	var ps []*provider
	for i := 1; i <= 3; i++ {
		p := newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i), "loadbalance="+lbName)
		p.GetURL().SetParam(ConfigKey, "orca.blackoutMs=0&orca.updateMs=1")
		ps = append(ps, p)
	}
	ci := clusterOf(t, "failover", wrapAll(ps...))
	calls := func(n int) map[string]int {
		called := map[string]int{}
		for i := 0; i < n; i++ {
			res := call(ci, "sayHello")
			if res.Error() != nil {
				t.Fatal(res.Error())
			}
			called[addrOf(res)]++
		}
		return called
	}
	// Before any report: the configured weights, equal.
	for addr, n := range calls(300) {
		if n != 100 {
			t.Errorf("before the reports, %s took %d of 300 calls, want 100", addr, n)
		}
	}
	for i, p := range ps {
		qps := 100 * float64(i+1)
		if err := Get(lbName).ReportLoad(svc, p.GetURL(), qps, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	// The weights are recomputed by the first pick after orca.updateMs (1 ms)
	// has passed since the last recomputation.
	time.Sleep(2 * time.Millisecond)
	called := calls(600)
	for i := range ps {
		addr := fmt.Sprintf("10.0.0.%d:20000", i+1)
		if want := 100 * float64(i+1); math.Abs(float64(called[addr])-want) > 6 {
			t.Errorf("after the reports, %s took %d of 600 calls, want %v ± 6 (%v)", addr, called[addr], want, called)
		}
	}
	stats, err := Get(lbName).Stats(svc)
	if err != nil || len(stats) != 1 {
		t.Fatalf("stats: %v, %v", stats, err)
	}
	for _, inv := range stats[0].Invokers {
		o, ok := inv.Orca()
		if !ok || o.Weight == nil || !o.Counted || !o.Reported {
			t.Errorf("%s: orca %+v (ok %v), want a counted weight", inv.Address, o, ok)
		}
	}
	assertNoneInFlight(t, lbName, svc)
}

// A report reaches every balancer of the service: the one of a method that
// providers weigh on their own (methods.<m>.weight) too.
func TestOrcaReportReachesEveryBalancerOfTheService(t *testing.T) {
	svc := serviceName(t)
	const lbName = Name + "-orca"
	var ps []*provider
	for i := 1; i <= 2; i++ {
		p := newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i), "loadbalance="+lbName+"&methods.sayBye.weight=50")
		p.GetURL().SetParam(ConfigKey, "orca.blackoutMs=0")
		ps = append(ps, p)
	}
	ci := clusterOf(t, "failover", wrapAll(ps...))
	for _, m := range []string{"sayHello", "sayBye"} {
		if res := call(ci, m); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	if err := Get(lbName).ReportLoad(svc, ps[1].GetURL(), 300, 30, 0.5); err != nil {
		t.Fatal(err)
	}
	stats, err := Get(lbName).Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 {
		t.Fatalf("%d balancers, want 2 (the service's and sayBye's weights)", len(stats))
	}
	for _, s := range stats {
		for _, inv := range s.Invokers {
			o, _ := inv.Orca()
			reported := inv.Address == "10.0.0.2:20000"
			// 300 / (0.5 + 30/300) = 500.
			if reported && (o.Weight == nil || math.Abs(*o.Weight-500) > 1e-9) || !reported && o.Weight != nil {
				t.Errorf("%s (weight %d): orca %+v, want weight 500 for 10.0.0.2 only", inv.Address, inv.Weight, o)
			}
		}
	}
}

// Bad numbers are an error wherever the report goes; reports for services
// or providers polylb does not balance are ignored.
func TestOrcaReportLoadErrorsAndIgnoredReports(t *testing.T) {
	svc := serviceName(t)
	const lbName = Name + "-orca"
	p := newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName)
	other := newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName)
	ci := clusterOf(t, "failover", wrapAll(p, other))
	if res := call(ci, "sayHello"); res.Error() != nil {
		t.Fatal(res.Error())
	}
	stranger := newProvider(t, svc, "10.0.0.9:20000", "")
	for _, target := range []struct {
		what, svc string
		p         *provider
	}{{"a provider of the set", svc, p}, {"a provider not in the set", svc, stranger}, {"an unknown service", "com.example.Nobody", p}} {
		for _, l := range [][3]float64{{math.NaN(), 0, 1}, {math.Inf(1), 0, 1}, {100, -1, 1}, {100, 0, math.NaN()}, {10, 20, 1}} {
			err := Get(lbName).ReportLoad(target.svc, target.p.GetURL(), l[0], l[1], l[2])
			if !errors.Is(err, polylb.ErrInvalidArgument) {
				t.Errorf("%s, report %v: %v, want ErrInvalidArgument", target.what, l, err)
			}
		}
		if err := Get(lbName).ReportLoad(target.svc, target.p.GetURL(), 100, 0, 1); err != nil {
			t.Errorf("%s: %v", target.what, err)
		}
	}
	if err := Get(lbName).ReportLoad(svc, nil, 100, 0, 1); err != nil {
		t.Errorf("nil URL: %v", err)
	}
	// The bad reports changed nothing; the good one to the provider counts.
	stats, err := Get(lbName).Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || len(stats[0].Invokers) != 2 {
		t.Fatalf("stats %+v, want one balancer over the 2 providers", stats)
	}
	for _, inv := range stats[0].Invokers {
		o, _ := inv.Orca()
		if inv.Address == "10.0.0.1:20000" && (o.Weight == nil || *o.Weight != 100) || inv.Address != "10.0.0.1:20000" && o.Weight != nil {
			t.Errorf("%s: orca %+v, want weight 100 for 10.0.0.1 only", inv.Address, o)
		}
	}
}
