package polylb_test

import (
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// The hot calls allocate nothing, as the library's select and report do
// (tests/allocations.rs): key, candidates, exclusions and a per-call
// []byte(string) key stay on the caller's stack through cgo (noescape), the
// clock arguments are integers.
func TestHotCallsDoNotAllocate(t *testing.T) {
	lb := newBalancer(t, "loadbalance=consistenthash", weighted(1, 2, 3))
	m := method(t, lb, "sayHello")
	key := []byte("user-42")
	userID := "user-4242"
	candidates, excluded := []uint64{1, 2, 3}, []uint64{2}
	now := time.Unix(1_700_000_000, 0)
	orca := newBalancer(t, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=1", weighted(1, 2, 3))
	for name, run := range map[string]func(){
		"Select+Report": func() {
			id, err := lb.Select(m, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := lb.Report(m, id, time.Millisecond, polylb.Success); err != nil {
				t.Fatal(err)
			}
		},
		"Select([]byte(string))+Report": func() {
			id, err := lb.Select(m, []byte(userID))
			if err != nil {
				t.Fatal(err)
			}
			if err := lb.Report(m, id, time.Millisecond, polylb.Failure); err != nil {
				t.Fatal(err)
			}
		},
		"SelectAmong+Report": func() {
			id, err := lb.SelectAmong(m, key, candidates, excluded)
			if err != nil {
				t.Fatal(err)
			}
			if err := lb.Report(m, id, time.Millisecond, polylb.Timeout); err != nil {
				t.Fatal(err)
			}
		},
		"SelectAt+ReportProviderMetricsAt+ReportAt": func() {
			id, err := lb.SelectAt(m, key, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := lb.ReportProviderMetricsAt(m, id, now, 0.5, time.Millisecond, now); err != nil {
				t.Fatal(err)
			}
			if err := lb.ReportAt(m, id, time.Millisecond, polylb.Cancelled, now); err != nil {
				t.Fatal(err)
			}
		},
		"orca SelectAt+ReportLoadAt+ReportAt": func() {
			// A later time each run, so that picks recompute the weights too.
			now = now.Add(time.Millisecond)
			id, err := orca.SelectAt(polylb.ServiceLevel, nil, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := orca.ReportLoadAt(id, 100*float64(id), 1, 0.5, now); err != nil {
				t.Fatal(err)
			}
			if err := orca.ReportAt(polylb.ServiceLevel, id, time.Millisecond, polylb.Success, now); err != nil {
				t.Fatal(err)
			}
		},
	} {
		if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
			t.Errorf("%s: %v allocations per run, want 0", name, allocs)
		}
	}
	for _, b := range []*polylb.Balancer{lb, orca} {
		for _, inv := range stats(t, b).Invokers {
			if inv.Active != 0 {
				t.Errorf("id %d: %d calls in flight", inv.ID, inv.Active)
			}
		}
	}
	s, err := orca.StatsAt(now)
	if err != nil {
		t.Fatal(err)
	}
	if inv, _ := s.Invoker(3); string(inv.Extra["orca_counted"]) != "true" {
		t.Errorf("orca: the reports did not count: %v", rawFields(inv.Extra))
	}
}
