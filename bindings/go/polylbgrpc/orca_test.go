package polylbgrpc

import (
	"context"
	"math"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/resolver"
)

// orca weighs endpoints by the ORCA load reports their servers send with
// each call (orca.CallMetricsServerOption; the client parses them because it
// imports google.golang.org/grpc/orca). Three servers of different capacity
// report qps / (utilization + eps/qps): 100 / (0.6 + 20/100) = 125 (errors
// count against it), 100 / 0.4 = 250 (CPU only: the utilization when the
// application sets none) and 100 / 0.2 = 500 (its application utilization,
// not its CPU of 0.9, which would make it 111). Through the blackout the
// calls go evenly (the configured weights); after it, 1 : 2 : 4.
func TestOrcaLoadReportsDealTheCalls(t *testing.T) {
	small, medium, large := startProvider(t), startProvider(t), startProvider(t)
	small.load.Store(&serverLoad{qps: 100, eps: 20, application: 0.6})
	medium.cpu.Store(math.Float64bits(0.4))
	medium.load.Store(&serverLoad{qps: 100})
	large.cpu.Store(math.Float64bits(0.9))
	large.load.Store(&serverLoad{qps: 100, application: 0.2})
	providers := []*provider{small, medium, large}
	const blackout = 500 * time.Millisecond
	cl := dial(t, "loadbalance=orca&orca.blackoutMs=500&orca.updateMs=20",
		[]resolver.Endpoint{endpointOf(small.addr), endpointOf(medium.addr), endpointOf(large.addr)})
	cl.waitReady(t, small.addr, medium.addr, large.addr)

	calls := func(n int) []int64 { return dealt(t, cl, providers, n) }
	start := time.Now()
	during := calls(60)
	if time.Since(start) < blackout {
		// Weights reported, none counted yet: the configured weights (the
		// same for all) deal the calls.
		for i, n := range during {
			if n < 18 || n > 22 {
				t.Errorf("in the blackout, provider %d got %d of 60 calls, want 20 ± 2 (%v)", i, n, during)
			}
		}
	} else {
		t.Logf("60 calls took %v, past the blackout: their split (%v) is not checked", time.Since(start), during)
	}
	time.Sleep(blackout - time.Since(start) + 100*time.Millisecond)
	calls(30) // the reports of calls from before the blackout's end count now
	time.Sleep(50 * time.Millisecond)

	got := calls(700)
	t.Logf("after the blackout: %v of 700 calls", got)
	for i, want := range []float64{100, 200, 400} {
		if math.Abs(float64(got[i])-want) > 15 {
			t.Errorf("provider %d got %d of 700 calls, want %v ± 15 (capacities 125 : 250 : 500; %v)", i, got[i], want, got)
		}
	}
	s := cl.stats(t)
	for i, want := range []float64{125, 250, 500} {
		o, ok := byAddress(s, providers[i].addr).Orca()
		if !ok || o.Weight == nil || math.Abs(*o.Weight-want) > 1e-9 || !o.Counted || !o.Reported {
			t.Errorf("provider %d: orca %+v (ok %v), want weight %v, counted", i, o, ok, want)
		}
	}
}

// The ORCA report reaches orca through the pick's Done, with the
// application's utilization first, the CPU's without it, unless orca reads
// out-of-band reports (then the trailer gives no weight); other strategies
// leave it to adaptive's reading (CPU only). Both paths keep the pick and
// its Done at one allocation (a report the library refuses costs the error
// the binding builds for it).
func TestOrcaReportInDone(t *testing.T) {
	pickers := map[uint64]balancer.Picker{}
	for id := uint64(1); id <= 10; id++ {
		pickers[id] = fixedPicker{}
	}
	for _, tc := range []struct {
		config string
		report *v3orcapb.OrcaLoadReport
		want   any  // the picked invoker's orca_weight: nil, or a weight
		oob    bool // out-of-band reports on
	}{
		{"loadbalance=orca&orca.blackoutMs=0", &v3orcapb.OrcaLoadReport{RpsFractional: 100, Eps: 10, ApplicationUtilization: 0.4, CpuUtilization: 0.9}, 200.0, false},
		{"loadbalance=orca&orca.blackoutMs=0", &v3orcapb.OrcaLoadReport{RpsFractional: 100, CpuUtilization: 0.25}, 400.0, false},
		{"loadbalance=orca&orca.blackoutMs=0", &v3orcapb.OrcaLoadReport{RpsFractional: 100}, nil, false},                              // no utilization: nothing said
		{"loadbalance=orca&orca.blackoutMs=0", &v3orcapb.OrcaLoadReport{RpsFractional: 10, Eps: 20, CpuUtilization: 0.5}, nil, false}, // refused
		{"loadbalance=orca&orca.blackoutMs=0", &v3orcapb.OrcaLoadReport{RpsFractional: 100, CpuUtilization: 0.25}, nil, true},         // read out of band only
		{"loadbalance=adaptive", &v3orcapb.OrcaLoadReport{RpsFractional: 100, CpuUtilization: 0.25}, nil, false},
	} {
		lb := tenInvokers(t, tc.config)
		p := &picker{lb: newLBState(lb, false), pickers: pickers}
		p.lb.oob = tc.oob
		if p.lb.orca != (tc.config != "loadbalance=adaptive") {
			t.Fatalf("%s: orca %v", tc.config, p.lb.orca)
		}
		info := balancer.PickInfo{FullMethodName: "/pkg.Service/Method", Ctx: context.Background()}
		var picked []uint64
		run := func() {
			result, err := p.Pick(info)
			if err != nil {
				t.Fatal(err)
			}
			result.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true, ServerLoad: tc.report})
		}
		run()
		for _, inv := range mustStats(t, lb).Invokers {
			if inv.Selected == 1 {
				picked = append(picked, inv.ID)
			}
		}
		if len(picked) != 1 {
			t.Fatalf("%s: picked %v", tc.config, picked)
		}
		inv, _ := mustStats(t, lb).Invoker(picked[0])
		o, isOrca := inv.Orca()
		switch want := tc.want.(type) {
		case nil:
			if isOrca && o.Weight != nil {
				t.Errorf("%s, report %v: weight %v, want none", tc.config, tc.report, *o.Weight)
			}
		case float64:
			if o.Weight == nil || math.Abs(*o.Weight-want) > 1e-9 {
				t.Errorf("%s, report %v: orca %+v, want weight %v", tc.config, tc.report, o, want)
			}
		}
		if tc.config == "loadbalance=adaptive" {
			// adaptive got the CPU as provider metrics (25 %).
			found := false
			for _, row := range inv.Methods {
				found = found || string(row.Extra["cpu_load"]) == "25"
			}
			if !found {
				t.Errorf("adaptive: no cpu_load 25 in %+v", inv.Methods)
			}
		}
		if tc.report.Eps > tc.report.RpsFractional {
			continue // a refused report costs the error the binding builds (the server's mistake)
		}
		if allocs := testing.AllocsPerRun(1000, run); allocs != 1 {
			t.Errorf("%s: %v allocations per pick and Done with a load report, want 1", tc.config, allocs)
		}
	}
}

func mustStats(t *testing.T, lb *polylb.Balancer) polylb.Stats {
	t.Helper()
	s, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
