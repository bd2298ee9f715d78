package polylbdubbo

import (
	"context"
	"errors"
	"testing"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

// A provider leaves the registry while a call to it runs: dubbo-go destroys
// its invoker, which drops the invoker's URL, before the call returns. The
// call is reported from the pick it was sent for (not looked up by the URL,
// which is gone), and nothing stays in flight.
func TestInvokerDestroyedDuringTheCall(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-leastactive"
	// No retry: dubbo-go's failover would retry over the same static list,
	// which still holds the destroyed invoker (a registry's would not), and
	// panic itself on its nil URL.
	params := "loadbalance=" + lbName + "&retries=0"
	a := newProvider(t, svc, "10.0.0.1:20000", params)
	b := newProvider(t, svc, "10.0.0.2:20000", params)
	leaving := func(p *provider) func(context.Context, base.Invocation) result.Result {
		return func(context.Context, base.Invocation) result.Result {
			p.Destroy() // the registry's refresh, meanwhile
			return &result.RPCResult{Err: errors.New("connection reset")}
		}
	}
	a.fn, b.fn = leaving(a), leaving(b)
	res := call(clusterOf(t, "failover", wrapAll(a, b)), "sayHello")
	if res.Error() == nil {
		t.Fatal("the call succeeded")
	}
	assertNoneInFlight(t, lbName, svc)
}
