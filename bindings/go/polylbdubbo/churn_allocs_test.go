package polylbdubbo

import (
	"fmt"
	"runtime"
	"testing"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"
)

// Selects among a large routed subset, or over a second reference's objects
// of the same providers (aliases of the set's members), allocate no
// candidate buffer per call: with 1,000 providers one grown by doubling was
// four allocations of 1 KB or more (12 to 25 KB) a call. Counted by size: at
// most one such allocation in two calls, as the race detector's sync.Pool
// drops a quarter of what is put back.
func TestLargeSubsetsAndSecondReferencesAllocateLittle(t *testing.T) {
	svc := serviceName(t)
	const lbName = Name + "-random"
	mk := func() []base.Invoker {
		list := make([]base.Invoker, 1000)
		for i := range list {
			list[i] = newProvider(t, svc, fmt.Sprintf("10.0.%d.%d:20880", i/250, i%250), "loadbalance="+lbName)
		}
		return list
	}
	first, second := mk(), mk()
	lb := Get(lbName)
	subsetA := append([]base.Invoker(nil), first[:300]...)
	subsetB := append([]base.Invoker(nil), first[:700]...)
	large := func(m *runtime.MemStats) (n uint64) {
		for _, c := range m.BySize {
			if c.Size >= 1024 {
				n += c.Mallocs
			}
		}
		return n
	}
	for _, lists := range [][][]base.Invoker{{subsetA, subsetB}, {first, second}, {second}} {
		for i := 0; i < 10; i++ {
			lb.Select(lists[i%len(lists)], invocation.NewRPCInvocation("sayHello", nil, nil))
		}
		const calls = 2000
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := 0; i < calls; i++ {
			lb.Select(lists[i%len(lists)], invocation.NewRPCInvocation("sayHello", nil, nil))
		}
		runtime.ReadMemStats(&after)
		if perCall := float64(large(&after)-large(&before)) / calls; perCall > 0.5 {
			t.Errorf("%d lists of %d, %d...: %.2f allocations of 1 KB or more per select",
				len(lists), len(lists[0]), len(lists[len(lists)-1]), perCall)
		}
	}
}
