package polylbdubbo

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

// doneInvoker is a directory's invoker that tells when its call, filters
// included, has returned.
type doneInvoker struct {
	base.Invoker
	wg *sync.WaitGroup
}

func (d *doneInvoker) Invoke(ctx context.Context, inv base.Invocation) result.Result {
	defer d.wg.Done()
	return d.Invoker.Invoke(ctx, inv)
}

// yieldingInvocation lets other goroutines run when it finds no record of
// polylb's picks, widening the window in which forks race to make one.
type yieldingInvocation struct{ *invocation.RPCInvocation }

func (y yieldingInvocation) GetAttribute(key string) (any, bool) {
	v, ok := y.RPCInvocation.GetAttribute(key)
	if !ok && key == picksAttr {
		for i := 0; i < 20; i++ {
			runtime.Gosched()
		}
	}
	return v, ok
}

// Forking to every provider (forks above the list's size) sends without a
// select: each fork, counted by the filter from its own goroutine, is
// reported once, whichever fork's goroutine records the invocation's first.
func TestForkingToAllReportsEveryFork(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-leastactive"
	params := "loadbalance=" + lbName + "&forks=10"
	var wg sync.WaitGroup
	var ps []*provider
	var list []base.Invoker
	for i := 1; i <= 4; i++ {
		p := newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i), params)
		ps = append(ps, p)
		list = append(list, &doneInvoker{Invoker: withFilters(p), wg: &wg})
	}
	// polylb balances the service once, so that the filter counts its calls.
	wg.Add(1)
	call(clusterOf(t, "failover", list), "sayHello")
	wg.Wait()
	ci := clusterOf(t, "forking", list)
	const n = 1000
	for i := 0; i < n; i++ {
		wg.Add(len(list))
		inv := yieldingInvocation{newInvocation("sayHello")}
		if res := ci.Invoke(context.Background(), inv); res.Error() != nil {
			t.Fatal(res.Error())
		}
		wg.Wait()
	}
	assertNoneInFlight(t, lbName, svc)
	stats, _ := Get(lbName).Stats(svc)
	var selected uint64
	for _, inv := range stats[0].Invokers {
		selected += inv.Selected
	}
	if selected != 1+n*4 {
		t.Errorf("%d calls counted, want %d", selected, 1+n*4)
	}
}
