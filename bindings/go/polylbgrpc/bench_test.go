package polylbgrpc

import (
	"context"
	"fmt"
	"testing"

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc/balancer"
)

// fixedPicker stands for an endpoint's pick_first child over a READY
// connection: it always gives the same result.
type fixedPicker struct{}

func (fixedPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, nil
}

// BenchmarkPickDone is the policy's own cost per RPC (Pick, then Done with a
// success) over 10 endpoints — the library's select and report through cgo,
// the method lookup, the two clock reads of the call's latency and the Done
// closure — beside the binding's bare Select+Report in the same run. A gRPC
// call itself costs tens of microseconds on loopback.
func BenchmarkPickDone(b *testing.B) {
	for _, config := range []string{"loadbalance=random", "loadbalance=p2c", "loadbalance=peakewma"} {
		b.Run(config+"/bare", func(b *testing.B) {
			lb := tenInvokers(b, config)
			method, err := lb.Method("/pkg.Service/Method")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id, err := lb.Select(method, nil)
				if err != nil {
					b.Fatal(err)
				}
				_ = lb.Report(method, id, 0, polylb.Success)
			}
		})
		b.Run(config+"/policy", func(b *testing.B) {
			lb := tenInvokers(b, config)
			pickers := map[uint64]balancer.Picker{}
			for id := uint64(1); id <= 10; id++ {
				pickers[id] = fixedPicker{}
			}
			p := &picker{lb: newLBState(lb, false), pickers: pickers}
			info := balancer.PickInfo{FullMethodName: "/pkg.Service/Method", Ctx: context.Background()}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				result, err := p.Pick(info)
				if err != nil {
					b.Fatal(err)
				}
				result.Done(balancer.DoneInfo{})
			}
		})
	}
}

func tenInvokers(b testing.TB, config string) *polylb.Balancer {
	lb, err := polylb.New(config)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lb.Close() })
	set := make([]polylb.Invoker, 10)
	for i := range set {
		set[i] = polylb.NewInvoker(uint64(i+1), fmt.Sprintf("10.0.0.%d:50051", i+1))
	}
	if err := lb.Update(set); err != nil {
		b.Fatal(err)
	}
	return lb
}
