package polylb_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// virtualNow is a fixed instant for tests that drive time themselves.
var virtualNow = time.UnixMilli(1_700_000_000_000)

// provider is invoker n as the Dubbo vectors name it: 10.0.0.n:20880.
func provider(n uint64) polylb.Invoker {
	return polylb.NewInvoker(n, fmt.Sprintf("10.0.0.%d:20880", n))
}

// weighted returns providers 1..len(weights) with those weights.
func weighted(weights ...int32) []polylb.Invoker {
	invokers := make([]polylb.Invoker, len(weights))
	for i, w := range weights {
		invokers[i] = provider(uint64(i + 1))
		invokers[i].Weight = w
	}
	return invokers
}

// newBalancer creates a balancer with the given set, closed when the test ends.
func newBalancer(t testing.TB, config string, invokers []polylb.Invoker) *polylb.Balancer {
	t.Helper()
	lb, err := polylb.New(config)
	if err != nil {
		t.Fatalf("New(%q): %v", config, err)
	}
	t.Cleanup(func() { lb.Close() })
	if invokers != nil {
		if err := lb.Update(invokers); err != nil {
			t.Fatalf("Update: %v", err)
		}
	}
	return lb
}

func method(t testing.TB, lb *polylb.Balancer, name string) polylb.Method {
	t.Helper()
	m, err := lb.Method(name)
	if err != nil {
		t.Fatalf("Method(%q): %v", name, err)
	}
	return m
}

// countPicks selects draws times, reporting each call as a quick success,
// and counts picks per id.
func countPicks(t testing.TB, lb *polylb.Balancer, m polylb.Method, draws int) map[uint64]int {
	t.Helper()
	counts := map[uint64]int{}
	for i := 0; i < draws; i++ {
		id, err := lb.Select(m, nil)
		if err != nil {
			t.Fatalf("Select #%d: %v", i, err)
		}
		if err := lb.Report(m, id, time.Millisecond, polylb.Success); err != nil {
			t.Fatalf("Report #%d: %v", i, err)
		}
		counts[id]++
	}
	return counts
}

// assertBinomial checks that count is within 5 standard deviations of a
// Binomial(draws, p): a false alarm about once in 1.7 million checks, while a
// wrong weight (e.g. an off-by-one slot or a swapped invoker) is far outside.
func assertBinomial(t testing.TB, what string, count, draws int, p float64) {
	t.Helper()
	mean := float64(draws) * p
	sigma := math.Sqrt(float64(draws) * p * (1 - p))
	if math.Abs(float64(count)-mean) > 5*sigma {
		t.Errorf("%s: %d of %d picks, expected %.1f ± %.1f (5σ)", what, count, draws, mean, 5*sigma)
	}
}

func stats(t testing.TB, lb *polylb.Balancer) polylb.Stats {
	t.Helper()
	s, err := lb.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return s
}
