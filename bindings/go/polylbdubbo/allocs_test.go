package polylbdubbo

import (
	"context"
	"fmt"
	"testing"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

// What one call costs the adapter in allocations, over dubbo-go's own for a
// fresh invocation with two attributes: one, the invocation's record of its
// picks, which holds the first pick and room for a call and a retry. The
// pick and the record's two lists were allocations of their own (4 per call).
func TestAdapterAllocatesOncePerCall(t *testing.T) {
	svc := serviceName(t)
	const lbName = Name + "-random"
	answer := &result.RPCResult{Rest: "ok"}
	list := make([]base.Invoker, 10)
	for i := range list {
		p := newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20880", i+1), "loadbalance="+lbName)
		p.fn = func(context.Context, base.Invocation) result.Result { return answer }
		list[i] = p
	}
	lb, f, ctx := Get(lbName), &Filter{}, context.Background()
	cluster := &clusterFunc{fn: func(ctx context.Context, inv base.Invocation) result.Result {
		chosen := lb.Select(list, inv)
		return f.OnResponse(ctx, f.Invoke(ctx, chosen, inv), chosen, inv)
	}}
	run := func() {
		inv := invocation.NewRPCInvocation("sayHello", nil, nil)
		if res := (interceptor{}).Invoke(ctx, cluster, inv); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	dubbos := func() {
		inv := invocation.NewRPCInvocation("sayHello", nil, nil)
		inv.SetAttribute(endsAttr, true)
		inv.SetAttribute(picksAttr, answer)
	}
	run() // the service's state and balancer are made on the first call
	adapter := testing.AllocsPerRun(1000, run) - testing.AllocsPerRun(1000, dubbos)
	if adapter > 1 {
		t.Errorf("the adapter allocates %v times per call, want at most 1", adapter)
	}
	assertNoneInFlight(t, lbName, svc)
}
