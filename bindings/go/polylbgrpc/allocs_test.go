package polylbgrpc

import (
	"context"
	"testing"

	"google.golang.org/grpc/balancer"
)

// A pick and its Done allocate once: the Done closure, which holds the call's
// start, context and ids (64 B). The method lookup, the select and the
// report allocate nothing.
func TestPickAndDoneAllocateOnce(t *testing.T) {
	lb := tenInvokers(t, "loadbalance=random")
	pickers := map[uint64]balancer.Picker{}
	for id := uint64(1); id <= 10; id++ {
		pickers[id] = fixedPicker{}
	}
	p := &picker{lb: newLBState(lb, false), pickers: pickers}
	info := balancer.PickInfo{FullMethodName: "/pkg.Service/Method", Ctx: context.Background()}
	run := func() {
		result, err := p.Pick(info)
		if err != nil {
			t.Fatal(err)
		}
		result.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
	}
	run() // interns the method
	if allocs := testing.AllocsPerRun(1000, run); allocs != 1 {
		t.Errorf("%v allocations per pick and Done, want 1", allocs)
	}
	stats, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range stats.Invokers {
		if inv.Active != 0 || inv.Failures != 0 {
			t.Errorf("id %d: %d in flight, %d failures; want every pick reported as a success", inv.ID, inv.Active, inv.Failures)
		}
	}
}
