package polylb

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/polylb/polylb/bindings/go/internal/nativebench"
)

// The benchmarks measure, in one run, the floors a select+report through cgo
// can be compared with:
//
//   - Floor/cgo-1call: one cgo call to plb_abi_version, the cheapest export
//     (it returns a constant), i.e. the bare Go→C transition.
//   - Floor/cgo-2calls: two such calls. Select+Report is two cgo calls per
//     RPC, so this is the floor the goal (≤ 1.5×) is measured against.
//   - Native/select-report: select+report pairs looped in C (no Go in the
//     loop): the library's own cost, so SelectReport − Native is what the
//     binding and the cgo crossings add.
//   - PureGo/weighted-random: a native Go weighted random pick over a
//     precomputed cumulative array (binary search), no cgo: what a Go-only
//     balancer would cost.
//
// Parallel variants run the same bodies under b.RunParallel.

const benchInvokers = 10

func benchBalancer(b *testing.B, config string) (*Balancer, Method) {
	b.Helper()
	lb, err := New(config)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lb.Close() })
	invokers := make([]Invoker, benchInvokers)
	for i := range invokers {
		invokers[i] = NewInvoker(uint64(i+1), fmt.Sprintf("10.0.0.%d:20880", i+1))
		invokers[i].Weight = int32(10 * (i + 1)) // unequal, so random takes its weighted path
	}
	if err := lb.Update(invokers); err != nil {
		b.Fatal(err)
	}
	method, err := lb.Method("sayHello")
	if err != nil {
		b.Fatal(err)
	}
	return lb, method
}

var benchSink uint64

// No seed: a seeded balancer shares one random state between threads (for
// reproducibility), which is not how production runs.
var benchStrategies = []struct{ name, config string }{
	{"random", "loadbalance=random"},
	{"roundrobin", "loadbalance=roundrobin"},
	{"leastactive", "loadbalance=leastactive"},
	{"shortestresponse", "loadbalance=shortestresponse"},
	{"consistenthash", "loadbalance=consistenthash"},
	{"adaptive", "loadbalance=adaptive"},
}

func BenchmarkFloor(b *testing.B) {
	b.Run("cgo-1call", func(b *testing.B) {
		b.ReportAllocs()
		var sink uint32
		for b.Loop() {
			sink += ABIVersion()
		}
		benchSink += uint64(sink)
	})
	b.Run("cgo-2calls", func(b *testing.B) {
		b.ReportAllocs()
		var sink uint32
		for b.Loop() {
			sink += ABIVersion()
			sink += ABIVersion()
		}
		benchSink += uint64(sink)
	})
}

func BenchmarkSelectReport(b *testing.B) {
	key := []byte("user-42")
	for _, s := range benchStrategies {
		b.Run(s.name, func(b *testing.B) {
			lb, method := benchBalancer(b, s.config)
			b.ReportAllocs()
			for b.Loop() {
				id, err := lb.Select(method, key)
				if err != nil {
					b.Fatal(err)
				}
				if err := lb.Report(method, id, time.Millisecond, Success); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCall is SelectReport through a Call: Call + Finish, the same two cgo
// calls plus a clock read at each end (SelectReport passes a constant
// elapsed time instead).
func BenchmarkCall(b *testing.B) {
	key := []byte("user-42")
	for _, s := range benchStrategies {
		b.Run(s.name, func(b *testing.B) {
			lb, method := benchBalancer(b, s.config)
			b.ReportAllocs()
			for b.Loop() {
				call, err := lb.Call(method, key)
				if err != nil {
					b.Fatal(err)
				}
				if err := call.Finish(Success); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSelectReportTimed is Select+Report timed by hand, as the package
// example does (time.Now after the select, time.Since at the report): the
// code Call replaces.
func BenchmarkSelectReportTimed(b *testing.B) {
	lb, method := benchBalancer(b, "loadbalance=random")
	key := []byte("user-42")
	b.ReportAllocs()
	for b.Loop() {
		id, err := lb.Select(method, key)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := lb.Report(method, id, time.Since(start), Success); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNative(b *testing.B) {
	for _, s := range benchStrategies {
		b.Run("select-report/"+s.name, func(b *testing.B) {
			loop, err := nativebench.New(s.config, benchInvokers, "user-42")
			if err != nil {
				b.Fatal(err)
			}
			defer loop.Close()
			b.ResetTimer()
			if err := loop.Run(b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkSelectStringKey converts a string key at each call, as a caller
// hashing on a user id would: noescape keeps the conversion on the stack.
func BenchmarkSelectStringKey(b *testing.B) {
	lb, method := benchBalancer(b, "loadbalance=consistenthash")
	users := []string{"user-1", "user-2", "user-3", "user-4"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id, err := lb.Select(method, []byte(users[i%len(users)]))
		if err != nil {
			b.Fatal(err)
		}
		benchSink += id
		i++
	}
}

// BenchmarkSelect is a select alone (one cgo call), to compare with
// Floor/cgo-1call. Calls stay "in flight", which only random ignores, so the
// strategy is random.
func BenchmarkSelect(b *testing.B) {
	lb, method := benchBalancer(b, "loadbalance=random")
	b.ReportAllocs()
	for b.Loop() {
		id, err := lb.Select(method, nil)
		if err != nil {
			b.Fatal(err)
		}
		benchSink += id
	}
}

// weightedPicker is the pure-Go comparison: cumulative weights + binary
// search, with the runtime's per-thread random source (math/rand/v2).
type weightedPicker struct {
	cumulative []int64
	ids        []uint64
}

func newWeightedPicker() *weightedPicker {
	p := &weightedPicker{}
	var total int64
	for i := 0; i < benchInvokers; i++ {
		total += int64(10 * (i + 1))
		p.cumulative = append(p.cumulative, total)
		p.ids = append(p.ids, uint64(i+1))
	}
	return p
}

func (p *weightedPicker) pick() uint64 {
	offset := rand.Int64N(p.cumulative[len(p.cumulative)-1])
	lo, hi := 0, len(p.cumulative)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.cumulative[mid] <= offset {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return p.ids[lo]
}

func BenchmarkPureGo(b *testing.B) {
	b.Run("weighted-random", func(b *testing.B) {
		p := newWeightedPicker()
		b.ReportAllocs()
		for b.Loop() {
			benchSink += p.pick()
		}
	})
}

func BenchmarkParallel(b *testing.B) {
	b.Run("floor/cgo-1call", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var sink uint32
			for pb.Next() {
				sink += ABIVersion()
			}
			_ = sink
		})
	})
	b.Run("floor/cgo-2calls", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var sink uint32
			for pb.Next() {
				sink += ABIVersion()
				sink += ABIVersion()
			}
			_ = sink
		})
	})
	for _, s := range benchStrategies {
		b.Run("select-report/"+s.name, func(b *testing.B) {
			lb, method := benchBalancer(b, s.config)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				key := []byte("user-42")
				for pb.Next() {
					id, err := lb.Select(method, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := lb.Report(method, id, time.Millisecond, Success); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("pure-go/weighted-random", func(b *testing.B) {
		p := newWeightedPicker()
		b.RunParallel(func(pb *testing.PB) {
			var sink uint64
			for pb.Next() {
				sink += p.pick()
			}
			_ = sink
		})
	})
}
