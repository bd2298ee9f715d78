// polylb (cgo binding) beside apache/dubbo-go's own LoadBalance implementations,
// on the same invoker sets, in the same run (bench/run.sh parses the output).
//
//	go test -run '^$' -bench . -cpu 1,2 -benchtime 200ms
//
// Every body runs under b.RunParallel, so -cpu 1 is one goroutine and -cpu 2
// is two goroutines on two threads; ns/op is wall time per operation over all
// goroutines.
//
// Rows:
//   - Floor/cgo-2calls: two cgo calls to the cheapest export (plb_abi_version):
//     the Go→C transition cost that polylb's Select+Report (two cgo calls)
//     can never go under.
//   - Floor/go-weighted: a native Go weighted random pick (cumulative array,
//     binary search, math/rand/v2 per-goroutine source): what a Go-only
//     balancer's pick costs.
//   - polylb/<strategy>: Select + Report through the public Go binding.
//   - dubbo-go/<strategy>: dubbo-go's LoadBalance.Select over []base.Invoker
//     (the same set: same addresses, weights 100/150/200). For leastactive
//     and p2c, which read in-flight counts, plus base.BeginCount/EndCount,
//     which dubbo-go's active filter does around each call: the "report".
//   - Call/<strategy>/call-object and /by-hand: Call + Finish (the binding times
//     the call) against Select, two clock reads and Report written out.
package peers

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"dubbo.apache.org/dubbo-go/v3/cluster/loadbalance"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/loadbalance/consistenthashing"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/loadbalance/leastactive"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/loadbalance/p2c"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/loadbalance/random"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/loadbalance/roundrobin"
	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"

	polylb "github.com/polylb/polylb/bindings/go"
)

var sizes = []int{10, 100, 1000}

const method = "sayHello"

func weight(i int) int  { return 100 + (i%3)*50 }
func addr(i int) string { return fmt.Sprintf("10.0.%d.%d:20880", i/250, i%250) }

var sink atomic.Uint64

func keys() [][]byte {
	r := rand.New(rand.NewPCG(7, 7))
	out := make([][]byte, 4096)
	for i := range out {
		k := make([]byte, 16)
		for j := range k {
			k[j] = byte(r.Uint32())
		}
		out[i] = k
	}
	return out
}

func BenchmarkFloor(b *testing.B) {
	b.Run("cgo-2calls", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var s uint32
			for pb.Next() {
				s += polylb.ABIVersion()
				s += polylb.ABIVersion()
			}
			sink.Add(uint64(s))
		})
	})
	for _, n := range sizes {
		cum := make([]int, n)
		t := 0
		for i := 0; i < n; i++ {
			t += weight(i)
			cum[i] = t
		}
		b.Run(fmt.Sprintf("go-weighted/n=%d", n), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 1))
				var s int
				for pb.Next() {
					off := r.IntN(t)
					s += sort.SearchInts(cum, off+1)
				}
				sink.Add(uint64(s))
			})
		})
	}
}

var polylbStrategies = []string{"random", "roundrobin", "leastactive", "consistenthash", "p2c"}

// newPolylb makes a balancer of strategy over the benchmark's set of n invokers.
func newPolylb(b *testing.B, strategy string, n int) (*polylb.Balancer, polylb.Method) {
	lb, err := polylb.New("loadbalance=" + strategy)
	if err != nil {
		b.Fatal(err)
	}
	inv := make([]polylb.Invoker, n)
	for i := range inv {
		inv[i] = polylb.NewInvoker(uint64(i), addr(i))
		inv[i].Weight = int32(weight(i))
	}
	if err := lb.Update(inv); err != nil {
		b.Fatal(err)
	}
	m, err := lb.Method(method)
	if err != nil {
		b.Fatal(err)
	}
	return lb, m
}

func BenchmarkPolylb(b *testing.B) {
	ks := keys()
	for _, strategy := range polylbStrategies {
		for _, n := range sizes {
			lb, m := newPolylb(b, strategy, n)
			b.Run(fmt.Sprintf("%s/n=%d", strategy, n), func(b *testing.B) {
				b.RunParallel(func(pb *testing.PB) {
					k := rand.IntN(4096)
					var s uint64
					for pb.Next() {
						k = (k + 1) & 4095
						id, err := lb.Select(m, ks[k])
						if err != nil {
							b.Error(err)
							return
						}
						lb.Report(m, id, 1000, polylb.Success)
						s += id
					}
					sink.Add(s)
				})
			})
			lb.Close()
		}
	}
}

// BenchmarkCall: the call object (Call + Finish, which times the call) against the
// same work by hand (Select, two clock reads, Report), n = 10: what the object adds.
func BenchmarkCall(b *testing.B) {
	const n = 10
	for _, strategy := range []string{"random", "peakewma"} {
		lb, m := newPolylb(b, strategy, n)
		b.Run(fmt.Sprintf("%s/call-object/n=%d", strategy, n), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				var s uint64
				for pb.Next() {
					call, err := lb.Call(m, nil)
					if err != nil {
						b.Error(err)
						return
					}
					s += call.ID()
					call.Finish(polylb.Success)
				}
				sink.Add(s)
			})
		})
		b.Run(fmt.Sprintf("%s/by-hand/n=%d", strategy, n), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				var s uint64
				for pb.Next() {
					id, err := lb.Select(m, nil)
					if err != nil {
						b.Error(err)
						return
					}
					start := time.Now()
					lb.Report(m, id, time.Since(start), polylb.Success)
					s += id
				}
				sink.Add(s)
			})
		})
		lb.Close()
	}
}

var dubboStrategies = []struct {
	name, key string
	count     bool
}{
	{"random", constant.LoadBalanceKeyRandom, false},
	{"roundrobin", constant.LoadBalanceKeyRoundRobin, false},
	{"leastactive", constant.LoadBalanceKeyLeastActive, true},
	{"consistenthash", constant.LoadBalanceKeyConsistentHashing, false},
	{"p2c", constant.LoadBalanceKeyP2C, true},
}

func BenchmarkDubboGo(b *testing.B) {
	ks := keys()
	invs := make([]base.Invocation, len(ks))
	for i, k := range ks {
		invs[i] = invocation.NewRPCInvocation(method, []any{string(k)}, nil)
	}
	for _, st := range dubboStrategies {
		for _, n := range sizes {
			invokers := make([]base.Invoker, n)
			for i := range invokers {
				url, err := common.NewURL(fmt.Sprintf("dubbo://%s/org.apache.demo.HelloService?weight=%d", addr(i), weight(i)))
				if err != nil {
					b.Fatal(err)
				}
				invokers[i] = base.NewBaseInvoker(url)
			}
			lb := extension.GetLoadbalance(st.key)
			var _ loadbalance.LoadBalance = lb
			b.Run(fmt.Sprintf("%s/n=%d", st.name, n), func(b *testing.B) {
				b.RunParallel(func(pb *testing.PB) {
					k := rand.IntN(4096)
					var s int
					for pb.Next() {
						k = (k + 1) & 4095
						iv := invs[k]
						picked := lb.Select(invokers, iv)
						if st.count {
							u := picked.GetURL()
							base.BeginCount(u, method)
							base.EndCount(u, method, 1, true)
						}
						if picked != nil {
							s++
						}
					}
					sink.Add(uint64(s))
				})
			})
		}
	}
}
