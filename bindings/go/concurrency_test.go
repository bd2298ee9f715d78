package polylb_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Many goroutines select and report while another replaces the set over and
// over (ids come and go, the set is sometimes empty). Every error must be one
// the churn explains, and once everything is reported no call is left in
// flight.
func TestConcurrentSelectReportDuringUpdates(t *testing.T) {
	for _, strategy := range []string{"random", "roundrobin", "leastactive", "shortestresponse", "consistenthash", "adaptive", "maglev", "rendezvous", "orca"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			lb := newBalancer(t, "loadbalance="+strategy, weighted(1, 2, 3, 4, 5, 6, 7, 8))
			methods := []polylb.Method{polylb.ServiceLevel, method(t, lb, "sayHello"), method(t, lb, "sayBye")}
			sets := [][]polylb.Invoker{
				weighted(1, 2, 3, 4, 5, 6, 7, 8),
				weighted(5, 5, 5)[1:], // ids 2, 3
				nil,                   // everyone gone
				{provider(8), provider(1), provider(4)},
			}
			var stop atomic.Bool
			var updater sync.WaitGroup
			updater.Add(1)
			go func() {
				defer updater.Done()
				for i := 0; !stop.Load(); i++ {
					if err := lb.Update(sets[i%len(sets)]); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
			}()

			const workers, calls = 8, 3000
			var selected atomic.Int64
			var workersDone sync.WaitGroup
			for w := 0; w < workers; w++ {
				workersDone.Add(1)
				go func() {
					defer workersDone.Done()
					for i := 0; i < calls; i++ {
						m := methods[i%len(methods)]
						key := []byte(fmt.Sprintf("user-%d", i))
						var id uint64
						var err error
						if i%5 == 0 {
							// Ids 1 and 8 are only sometimes in the set.
							id, err = lb.SelectAmong(m, key, []uint64{1, 8}, []uint64{8})
						} else {
							id, err = lb.Select(m, key)
						}
						switch {
						case errors.Is(err, polylb.ErrNoProvider), errors.Is(err, polylb.ErrUnknownCandidate):
							continue // the set changed under us: expected
						case err != nil:
							t.Errorf("select: %v", err)
							return
						}
						selected.Add(1)
						// Load reports for orca (the others ignore them), racing the
						// updates that move the invoker in and out of the set.
						if err := lb.ReportLoad(id, float64(100*id), float64(i%3), 0.5); err != nil {
							t.Errorf("report load: %v", err)
							return
						}
						if err := lb.Report(m, id, time.Duration(i%7)*time.Millisecond, polylb.Outcome(i%4)); err != nil {
							t.Errorf("report: %v", err)
							return
						}
					}
				}()
			}
			workersDone.Wait()
			stop.Store(true)
			updater.Wait()

			if selected.Load() == 0 {
				t.Fatal("no select succeeded")
			}
			if err := lb.Update(weighted(1, 2, 3, 4, 5, 6, 7, 8)); err != nil {
				t.Fatal(err)
			}
			for _, inv := range stats(t, lb).Invokers {
				if inv.Active != 0 {
					t.Errorf("id %d: %d calls still in flight after all were reported", inv.ID, inv.Active)
				}
			}
		})
	}
}

// Close while other goroutines are mid-call: every call either completes
// normally or fails with ErrClosed — a select racing with Close returns a
// valid id or ErrClosed, never the ErrNoProvider or ErrUnknownCandidate of
// the set Close empties — and nothing touches a freed handle (the handle is
// freed only by the cleanup once the balancer is unreachable; see
// Balancer.Close). Afterwards every method returns ErrClosed.
func TestCloseDuringCalls(t *testing.T) {
	for _, strategy := range []string{"leastactive", "roundrobin", "consistenthash", "adaptive", "orca"} {
		t.Run(strategy, func(t *testing.T) {
			for round := 0; round < 10; round++ {
				closeDuringCalls(t, "loadbalance="+strategy, round)
				if t.Failed() {
					return
				}
			}
		})
	}
}

func closeDuringCalls(t *testing.T, config string, round int) {
	lb, err := polylb.New(config)
	if err != nil {
		t.Fatal(err)
	}
	set := weighted(1, 2, 3)
	if err := lb.Update(set); err != nil {
		t.Fatal(err)
	}
	m, err := lb.Method("sayHello")
	if err != nil {
		t.Fatal(err)
	}
	valid := func(id uint64) bool { return id >= 1 && id <= 3 }
	var started, done sync.WaitGroup
	var closedSeen atomic.Int64
	const workers = 4
	for w := 0; w < workers; w++ {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			fail := func(what string, err error) bool {
				if err != nil && !errors.Is(err, polylb.ErrClosed) {
					t.Errorf("round %d: %s: %v, want a result or ErrClosed", round, what, err)
					return true
				}
				return false
			}
			for i := 0; ; i++ {
				id, err := lb.Select(m, []byte("user-42"))
				if errors.Is(err, polylb.ErrClosed) {
					closedSeen.Add(1)
					return
				}
				if fail("select", err) {
					return
				}
				if !valid(id) {
					t.Errorf("round %d: select returned id %d", round, id)
					return
				}
				if fail("report", lb.Report(m, id, time.Millisecond, polylb.Success)) {
					return
				}
				id, err = lb.SelectAmong(m, nil, []uint64{1, 2, 3}, []uint64{2})
				if fail("select among", err) {
					return
				}
				if err == nil {
					if id != 1 && id != 3 {
						t.Errorf("round %d: select among {1, 3} returned id %d", round, id)
						return
					}
					if fail("report", lb.Report(m, id, 0, polylb.Failure)) {
						return
					}
				}
				if fail("provider metrics", lb.ReportProviderMetrics(m, 1, time.Now(), 0.5, time.Millisecond)) {
					return
				}
				if fail("report load", lb.ReportLoad(id, 100, 1, 0.5)) {
					return
				}
				switch i % 8 {
				case 0:
					_, err = lb.Stats()
					if fail("stats", err) {
						return
					}
				case 1:
					if w == 0 && fail("update", lb.Update(set)) {
						return
					}
				case 2:
					_, err = lb.Method("sayBye")
					if fail("method", err) {
						return
					}
				}
			}
		}()
	}
	started.Wait()
	time.Sleep(time.Duration(1+round%3) * 300 * time.Microsecond)
	lb.Close()
	done.Wait()
	if closedSeen.Load() != workers {
		t.Fatalf("round %d: %d of %d goroutines saw ErrClosed", round, closedSeen.Load(), workers)
	}

	checks := map[string]error{}
	_, checks["Select"] = lb.Select(m, nil)
	_, checks["SelectAmong"] = lb.SelectAmong(m, nil, []uint64{1}, nil)
	checks["Report"] = lb.Report(m, 1, 0, polylb.Success)
	checks["ReportProviderMetrics"] = lb.ReportProviderMetrics(m, 1, time.Now(), 1, 0)
	checks["ReportLoad"] = lb.ReportLoad(1, 100, 0, 0.5)
	checks["Update"] = lb.Update(set)
	_, checks["Method"] = lb.Method("sayHello")
	_, checks["Stats"] = lb.Stats()
	_, checks["StatsJSON"] = lb.StatsJSON(time.Time{})
	checks["Close"] = lb.Close()
	for name, err := range checks {
		if name == "Close" {
			if err != nil {
				t.Errorf("round %d: Close again: %v", round, err)
			}
			continue
		}
		if !errors.Is(err, polylb.ErrClosed) {
			t.Errorf("round %d: %s after Close: %v, want ErrClosed", round, name, err)
		}
	}
}
