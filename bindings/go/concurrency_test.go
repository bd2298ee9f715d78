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
	for _, strategy := range []string{"random", "roundrobin", "leastactive", "shortestresponse", "consistenthash", "adaptive"} {
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

// Close while other goroutines are mid-call: calls either complete or fail
// with ErrClosed, and nothing touches a freed handle (the race detector and
// the library would notice a use after free only by luck, so the Go side
// counts calls in flight; see Balancer.Close).
func TestCloseDuringCalls(t *testing.T) {
	for round := 0; round < 20; round++ {
		lb, err := polylb.New("loadbalance=leastactive")
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.Update(weighted(1, 2, 3)); err != nil {
			t.Fatal(err)
		}
		var started, done sync.WaitGroup
		var closedSeen atomic.Int64
		for w := 0; w < 4; w++ {
			started.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				started.Done()
				for {
					id, err := lb.Select(polylb.ServiceLevel, nil)
					if errors.Is(err, polylb.ErrClosed) {
						closedSeen.Add(1)
						return
					}
					if err != nil {
						t.Errorf("select: %v", err)
						return
					}
					if err := lb.Report(polylb.ServiceLevel, id, 0, polylb.Success); err != nil && !errors.Is(err, polylb.ErrClosed) {
						t.Errorf("report: %v", err)
						return
					}
					if _, err := lb.Stats(); err != nil && !errors.Is(err, polylb.ErrClosed) {
						t.Errorf("stats: %v", err)
						return
					}
				}
			}()
		}
		started.Wait()
		time.Sleep(time.Millisecond)
		lb.Close()
		done.Wait()
		if closedSeen.Load() != 4 {
			t.Fatalf("round %d: %d of 4 goroutines saw ErrClosed", round, closedSeen.Load())
		}
	}
}
