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
// 12 to 25 KB of garbage a call.
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
		if perCall := (after.TotalAlloc - before.TotalAlloc) / calls; perCall > 2048 {
			t.Errorf("%d lists of %d, %d...: %d bytes allocated per select", len(lists), len(lists[0]), len(lists[len(lists)-1]), perCall)
		}
	}
}
