package polylb

// Internal tests: they look at the handle's bookkeeping, which the public
// API deliberately hides.

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestUseAfterCloseIsErrClosedAndCloseIsIdempotent(t *testing.T) {
	lb, err := New("loadbalance=roundrobin")
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.Update([]Invoker{NewInvoker(1, "10.0.0.1:20880")}); err != nil {
		t.Fatal(err)
	}
	if err := lb.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := lb.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !lb.freed.Load() {
		t.Error("handle not freed by Close with no call in flight")
	}
	checks := map[string]error{}
	_, checks["Select"] = lb.Select(ServiceLevel, nil)
	_, checks["SelectAt"] = lb.SelectAt(ServiceLevel, nil, time.Now())
	_, checks["SelectAmong"] = lb.SelectAmong(ServiceLevel, nil, []uint64{1}, nil)
	checks["Report"] = lb.Report(ServiceLevel, 1, 0, Success)
	checks["ReportProviderMetrics"] = lb.ReportProviderMetrics(ServiceLevel, 1, time.Now(), 1, 0)
	checks["Update"] = lb.Update(nil)
	_, checks["Method"] = lb.Method("sayHello")
	_, checks["Stats"] = lb.Stats()
	_, checks["StatsJSON"] = lb.StatsJSON(time.Time{})
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if lb.calls.Load() != closedBit {
		t.Errorf("refused calls left the in-flight count at %#x", lb.calls.Load())
	}
}

// The cleanup frees a balancer that was never closed once it is unreachable.
func TestCleanupFreesAnUnclosedBalancer(t *testing.T) {
	before := cleanupsRun.Load()
	func() {
		lb, err := New("")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lb.Select(ServiceLevel, nil); !errors.Is(err, ErrNoProvider) {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for cleanupsRun.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("the cleanup did not free an unreachable balancer")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}

	// A closed balancer's cleanup is cancelled: no double free.
	before = cleanupsRun.Load()
	func() {
		lb, err := New("")
		if err != nil {
			t.Fatal(err)
		}
		lb.Close()
	}()
	for i := 0; i < 5; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if cleanupsRun.Load() != before {
		t.Error("the cleanup ran for a closed balancer")
	}
}

// Stats grows its buffer when the library says it is too small, and
// remembers the size for next time.
func TestStatsGrowsItsBuffer(t *testing.T) {
	lb, err := New("loadbalance=roundrobin")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	invokers := make([]Invoker, 500)
	for i := range invokers {
		invokers[i] = NewInvoker(uint64(i+1), fmt.Sprintf("10.0.%d.%d:20880", i/256, i%256))
		invokers[i].Zone = "zone-" + strings.Repeat("z", i%7)
	}
	if err := lb.Update(invokers); err != nil {
		t.Fatal(err)
	}
	lb.statsHint.Store(16)
	s, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Invokers) != 500 {
		t.Fatalf("%d invokers in stats", len(s.Invokers))
	}
	for i, inv := range s.Invokers {
		want := invokers[i]
		if inv.ID != want.ID || inv.Address != want.Address || inv.Zone != want.Zone || inv.Weight != int64(want.Weight) {
			t.Fatalf("stats[%d] = %+v, registered %+v", i, inv, want)
		}
	}
	raw, err := lb.StatsJSON(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if hint := lb.statsHint.Load(); hint <= int64(len(raw)) {
		t.Errorf("hint %d not above the document's %d bytes", hint, len(raw))
	}
	if raw[len(raw)-1] != '}' {
		t.Errorf("document does not end in '}': the NUL or a truncation leaked in")
	}
}

// BenchmarkCloseGuard is what making Close safe during calls costs each call:
// the in-flight count's increment and decrement (one shared cache line).
func BenchmarkCloseGuard(b *testing.B) {
	lb, err := New("")
	if err != nil {
		b.Fatal(err)
	}
	defer lb.Close()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if lb.enter() {
				lb.leave()
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if lb.enter() {
					lb.leave()
				}
			}
		})
	})
}
