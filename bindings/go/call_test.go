package polylb_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// invokerStats returns the stats row of id, failing the test if it is missing.
func invokerStats(t *testing.T, lb *polylb.Balancer, id uint64) polylb.InvokerStats {
	t.Helper()
	inv, ok := stats(t, lb).Invoker(id)
	if !ok {
		t.Fatalf("no stats for id %d", id)
	}
	return inv
}

func TestCallIsInFlightUntilEnd(t *testing.T) {
	lb := newBalancer(t, "loadbalance=leastactive", weighted(100))
	m := method(t, lb, "sayHello")
	call, err := lb.Call(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if call.ID() != 1 {
		t.Fatalf("ID() = %d, want 1", call.ID())
	}
	if inv := invokerStats(t, lb, 1); inv.Active != 1 || inv.Selected != 1 {
		t.Errorf("open call: active %d, selected %d; want 1, 1", inv.Active, inv.Selected)
	}
	if err := call.Finish(polylb.Success); err != nil {
		t.Fatal(err)
	}
	inv := invokerStats(t, lb, 1)
	if inv.Active != 0 || inv.Succeeded != 1 {
		t.Errorf("ended call: active %d, succeeded %d; want 0, 1", inv.Active, inv.Succeeded)
	}
	if len(inv.Methods) != 1 || inv.Methods[0].Method != "sayHello" || inv.Methods[0].Succeeded != 1 {
		t.Errorf("reported under the wrong method: %+v", inv.Methods)
	}
}

// Only the first Finish reports: a second one (or a Done after it) returns nil
// and changes no counter.
func TestCallReportsExactlyOnce(t *testing.T) {
	lb := newBalancer(t, "loadbalance=leastactive", weighted(100))
	call, err := lb.Call(polylb.ServiceLevel, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := call.Finish(polylb.Success); err != nil {
		t.Fatal(err)
	}
	before := invokerStats(t, lb, 1)
	if err := call.Finish(polylb.Failure); err != nil {
		t.Errorf("second Finish: %v, want nil", err)
	}
	if err := call.Done(context.DeadlineExceeded); err != nil {
		t.Errorf("Done after Finish: %v, want nil", err)
	}
	after := invokerStats(t, lb, 1)
	if after.Active != 0 || after.Selected != 1 || after.Succeeded != 1 || after.Failures != 0 || after.Timeouts != 0 {
		t.Errorf("after a second Finish: %+v, want active 0, selected 1, succeeded 1, no failures (first Finish gave %+v)", after, before)
	}
}

// Done maps the call's error with OutcomeOf; a cancel undoes the in-flight
// count and counts nothing else.
func TestCallDoneOutcomes(t *testing.T) {
	for _, c := range []struct {
		err                           error
		succeeded, failures, timeouts uint64
	}{
		{nil, 1, 0, 0},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), 0, 1, 1},
		{context.Canceled, 0, 0, 0},
		{errors.New("connection reset"), 0, 1, 0},
	} {
		lb := newBalancer(t, "loadbalance=leastactive", weighted(100))
		call, err := lb.Call(polylb.ServiceLevel, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := call.Done(c.err); err != nil {
			t.Fatalf("Done(%v): %v", c.err, err)
		}
		inv := invokerStats(t, lb, 1)
		if inv.Active != 0 || inv.Succeeded != c.succeeded || inv.Failures != c.failures || inv.Timeouts != c.timeouts {
			t.Errorf("Done(%v): active %d, succeeded %d, failures %d, timeouts %d; want 0, %d, %d, %d",
				c.err, inv.Active, inv.Succeeded, inv.Failures, inv.Timeouts, c.succeeded, c.failures, c.timeouts)
		}
	}
}

// The report carries the time from the select to Finish: at least the 20 ms
// slept in between, at most the time around the whole call.
func TestCallReportsItsElapsedTime(t *testing.T) {
	lb := newBalancer(t, "loadbalance=shortestresponse", weighted(100))
	outer := time.Now()
	call, err := lb.Call(polylb.ServiceLevel, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := call.Finish(polylb.Success); err != nil {
		t.Fatal(err)
	}
	bound := time.Since(outer)
	raw, ok := invokerStats(t, lb, 1).Extra["mean_success_us"]
	if !ok {
		t.Fatal("no mean_success_us in the stats")
	}
	var meanUs int64
	if err := json.Unmarshal(raw, &meanUs); err != nil {
		t.Fatalf("mean_success_us %s: %v", raw, err)
	}
	if mean := time.Duration(meanUs) * time.Microsecond; mean < 20*time.Millisecond || mean > bound {
		t.Errorf("reported %v, want between 20ms and %v", mean, bound)
	}
}

func TestCallAmongExcludes(t *testing.T) {
	lb := newBalancer(t, "loadbalance=random", weighted(100, 100, 100, 100))
	for i := 0; i < 200; i++ {
		call, err := lb.CallAmong(polylb.ServiceLevel, nil, []uint64{1, 2, 3}, []uint64{1, 3})
		if err != nil {
			t.Fatal(err)
		}
		if call.ID() != 2 {
			t.Fatalf("CallAmong({1, 2, 3} minus {1, 3}) chose %d", call.ID())
		}
		if err := call.Finish(polylb.Failure); err != nil {
			t.Fatal(err)
		}
	}
	if inv := invokerStats(t, lb, 2); inv.Active != 0 || inv.Failures != 200 {
		t.Errorf("id 2: active %d, failures %d; want 0, 200", inv.Active, inv.Failures)
	}
	_, err := lb.CallAmong(polylb.ServiceLevel, nil, []uint64{1, 2}, []uint64{1, 2})
	wantStatus(t, "CallAmong with every candidate excluded", err, polylb.ErrNoCandidate)
}

// A failed select returns the zero Call, on which Finish and Done do nothing.
func TestCallErrors(t *testing.T) {
	lb := newBalancer(t, "", nil)
	call, err := lb.Call(polylb.ServiceLevel, nil)
	wantStatus(t, "Call on an empty set", err, polylb.ErrNoProvider)
	if call.ID() != 0 {
		t.Errorf("failed Call has id %d", call.ID())
	}
	if err := call.Finish(polylb.Success); err != nil {
		t.Errorf("Finish on the zero Call: %v, want nil", err)
	}
	if err := call.Done(errors.New("boom")); err != nil {
		t.Errorf("Done on the zero Call: %v, want nil", err)
	}
	var zero polylb.Call
	if err := zero.Finish(polylb.Failure); err != nil {
		t.Errorf("Finish on a declared Call: %v, want nil", err)
	}

	if err := lb.Update(weighted(100)); err != nil {
		t.Fatal(err)
	}
	open, err := lb.Call(polylb.ServiceLevel, nil)
	if err != nil {
		t.Fatal(err)
	}
	lb.Close()
	if _, err := lb.Call(polylb.ServiceLevel, nil); !errors.Is(err, polylb.ErrClosed) {
		t.Errorf("Call after Close: %v, want ErrClosed", err)
	}
	if _, err := lb.CallAmong(polylb.ServiceLevel, nil, []uint64{1}, nil); !errors.Is(err, polylb.ErrClosed) {
		t.Errorf("CallAmong after Close: %v, want ErrClosed", err)
	}
	if err := open.Finish(polylb.Success); !errors.Is(err, polylb.ErrClosed) {
		t.Errorf("Finish of a call made before Close: %v, want ErrClosed", err)
	}
	if err := open.Finish(polylb.Success); err != nil {
		t.Errorf("second Finish after Close: %v, want nil", err)
	}
}

// Goroutines make and end calls while another changes the set. Ids 1-3 stay
// in every set (so their counters survive the churn) and id 4 comes and goes:
// a CallAmong naming it fails while it is out, and ending that zero Call must
// do nothing. Afterwards no call is in flight.
func TestCallConcurrentWithUpdates(t *testing.T) {
	for _, strategy := range []string{"random", "leastactive", "shortestresponse", "consistenthash"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			lb := newBalancer(t, "loadbalance="+strategy, weighted(1, 2, 3, 4))
			m := method(t, lb, "sayHello")
			sets := [][]polylb.Invoker{weighted(1, 2, 3, 4), weighted(3, 2, 1), weighted(5, 5, 5, 5)}
			// Each set stays until at least 100 more calls have been tried
			// on it, so id 4 is out of the set under many calls.
			var tried, made atomic.Int64
			var want outcomeCounts // of the calls made on ids 1-3
			var stop atomic.Bool
			go func() {
				defer stop.Store(true)
				for i := 0; i < 10*len(sets); i++ {
					if err := lb.Update(sets[i%len(sets)]); err != nil {
						t.Error(err)
						return
					}
					for seen := tried.Load(); tried.Load() < seen+100 && !t.Failed(); {
						runtime.Gosched()
					}
				}
			}()

			const workers = 8
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; !stop.Load(); i++ {
						key := []byte(fmt.Sprintf("user-%d", i))
						var call polylb.Call
						var err error
						if i%3 == 0 {
							call, err = lb.CallAmong(m, key, []uint64{2, 4}, []uint64{2})
						} else {
							call, err = lb.Call(m, key)
						}
						if err != nil && !errors.Is(err, polylb.ErrUnknownCandidate) {
							t.Errorf("call: %v", err)
							return
						}
						tried.Add(1)
						outcome := polylb.Outcome(i % 4)
						if err == nil {
							made.Add(1)
							if call.ID() <= 3 {
								want.count(outcome)
							}
						}
						if err := call.Finish(outcome); err != nil {
							t.Errorf("end: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()

			if refused := tried.Load() - made.Load(); made.Load() == 0 || refused == 0 {
				t.Fatalf("%d calls made, %d refused: the churn did not happen under the calls", made.Load(), refused)
			}
			var got outcomeCounts
			for _, inv := range stats(t, lb).Invokers {
				if inv.ID > 3 {
					continue // its counters restart each time it comes back
				}
				if inv.Active != 0 {
					t.Errorf("id %d: %d calls still in flight after every call ended", inv.ID, inv.Active)
				}
				got.selected.Add(int64(inv.Selected))
				got.succeeded.Add(int64(inv.Succeeded))
				got.failures.Add(int64(inv.Failures))
			}
			// Each call on ids 1-3 reported once: none lost, none twice, and
			// no report from a failed select.
			if got.selected.Load() != want.selected.Load() || got.succeeded.Load() != want.succeeded.Load() || got.failures.Load() != want.failures.Load() {
				t.Errorf("ids 1-3: selected %d, succeeded %d, failures %d; the calls made give %d, %d, %d",
					got.selected.Load(), got.succeeded.Load(), got.failures.Load(),
					want.selected.Load(), want.succeeded.Load(), want.failures.Load())
			}
		})
	}
}

// outcomeCounts counts calls as the stats do: failures include timeouts, a
// cancel counts in neither.
type outcomeCounts struct{ selected, succeeded, failures atomic.Int64 }

func (c *outcomeCounts) count(outcome polylb.Outcome) {
	c.selected.Add(1)
	switch outcome {
	case polylb.Success:
		c.succeeded.Add(1)
	case polylb.Failure, polylb.Timeout:
		c.failures.Add(1)
	}
}

// Making and ending a call allocates nothing, the defer End idiom included.
func TestCallDoesNotAllocate(t *testing.T) {
	lb := newBalancer(t, "loadbalance=random", weighted(1, 2, 3))
	m := method(t, lb, "sayHello")
	key := []byte("user-42")
	excluded := []uint64{2}
	errReset := fmt.Errorf("read: %w", errors.New("connection reset by peer"))
	idiom := func() (err error) {
		call, err := lb.Call(m, key)
		if err != nil {
			return err
		}
		defer call.End(&err)
		return nil
	}
	for name, run := range map[string]func(){
		"Call+Finish": func() {
			call, err := lb.Call(m, key)
			if err != nil {
				t.Fatal(err)
			}
			call.Finish(polylb.Success)
		},
		"CallAmong+Done": func() {
			call, err := lb.CallAmong(m, key, nil, excluded)
			if err != nil {
				t.Fatal(err)
			}
			call.Done(context.DeadlineExceeded)
		},
		"Call+Done(a failure)": func() {
			call, err := lb.Call(m, key)
			if err != nil {
				t.Fatal(err)
			}
			call.Done(errReset)
		},
		"defer End": func() {
			if err := idiom(); err != nil {
				t.Fatal(err)
			}
		},
	} {
		if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
			t.Errorf("%s: %v allocations per run, want 0", name, allocs)
		}
	}
	for _, inv := range stats(t, lb).Invokers {
		if inv.Active != 0 {
			t.Errorf("id %d: %d calls in flight", inv.ID, inv.Active)
		}
	}
}

// defer call.End(&err): the function's error at its return decides, and a
// panic unwinding it is a failure (and goes on), where a deferred closure
// calling Done(err) would report a success.
func TestEndReadsTheErrorAtReturnAndCountsAPanic(t *testing.T) {
	lb := newBalancer(t, "loadbalance=leastactive", weighted(1))
	do := func(fail error, panics bool) (err error) {
		call, err := lb.Call(0, nil)
		if err != nil {
			return err
		}
		defer call.End(&err)
		if panics {
			panic("connection refused")
		}
		return fail
	}
	if err := do(nil, false); err != nil {
		t.Fatal(err)
	}
	_ = do(context.DeadlineExceeded, false)
	_ = do(errors.New("connection reset"), false)
	func() {
		defer func() {
			if r := recover(); r != "connection refused" {
				t.Errorf("the panic did not go on: recovered %v", r)
			}
		}()
		_ = do(nil, true)
	}()
	s := stats(t, lb).Invokers[0]
	if s.Selected != 4 || s.Succeeded != 1 || s.Failures != 3 || s.Timeouts != 1 || s.Active != 0 {
		t.Errorf("selected %d, succeeded %d, failures %d, timeouts %d, in flight %d; want 4, 1, 3 (a timeout, an error, the panic), 1, 0",
			s.Selected, s.Succeeded, s.Failures, s.Timeouts, s.Active)
	}
	var zero polylb.Call
	zero.End(nil) // the zero Call: nothing to report
}

// Finish with a value that is no Outcome is refused, and the call still ends.
func TestFinishWithNoOutcomeStillEndsTheCall(t *testing.T) {
	lb := newBalancer(t, "loadbalance=leastactive", weighted(1))
	call, err := lb.Call(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := call.Finish(polylb.Outcome(7)); !errors.Is(err, polylb.ErrUnknownOutcome) {
		t.Errorf("Finish(7): %v, want ErrUnknownOutcome", err)
	}
	s := stats(t, lb).Invokers[0]
	if s.Active != 0 || s.Succeeded != 0 || s.Failures != 0 {
		t.Errorf("in flight %d, succeeded %d, failures %d; want the call ended with no verdict", s.Active, s.Succeeded, s.Failures)
	}
}
