package polylbdubbo

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterpkg "dubbo.apache.org/dubbo-go/v3/cluster/cluster"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/cluster/failover"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/cluster/forking"
	"dubbo.apache.org/dubbo-go/v3/cluster/directory/static"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/router/chain"
	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"
	"dubbo.apache.org/dubbo-go/v3/protocol/protocolwrapper"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

// provider is a provider invoker as a protocol would return it: the filter
// chain wraps it (withFilters), and Invoke answers with fn.
type provider struct {
	*base.BaseInvoker
	calls atomic.Int64
	down  atomic.Bool // IsAvailable false without being destroyed
	fn    func(ctx context.Context, inv base.Invocation) result.Result
}

func (p *provider) IsAvailable() bool { return !p.down.Load() && p.BaseInvoker.IsAvailable() }

func (p *provider) Invoke(ctx context.Context, inv base.Invocation) result.Result {
	p.calls.Add(1)
	if p.fn != nil {
		return p.fn(ctx, inv)
	}
	return &result.RPCResult{Rest: p.GetURL().Location} // the answer names the provider
}

// newProvider makes a provider of service at addr whose URL carries params
// (e.g. "weight=200&loadbalance=polylb-roundrobin"), with the polylb filter
// configured as a reference's filter list would put it.
func newProvider(t testing.TB, service, addr, params string) *provider {
	t.Helper()
	raw := fmt.Sprintf("tri://%s/%s?interface=%s&%s=polylb", addr, service, service, constant.ReferenceFilterKey)
	if params != "" {
		raw += "&" + params
	}
	u, err := common.NewURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	return &provider{BaseInvoker: base.NewBaseInvoker(u)}
}

// withFilters is the invoker a directory holds: the provider wrapped in the
// reference's filter chain (here: polylb), as dubbo-go's protocol wrapper builds it.
func withFilters(p *provider) base.Invoker {
	return protocolwrapper.BuildInvokerChain(p, constant.ReferenceFilterKey)
}

func wrapAll(ps ...*provider) []base.Invoker {
	out := make([]base.Invoker, len(ps))
	for i, p := range ps {
		out[i] = withFilters(p)
	}
	return out
}

// clusterOf joins the invokers into a cluster invoker of that kind
// ("failover", "forking"), with dubbo-go's interceptors (polylb's among them).
func clusterOf(t testing.TB, kind string, invokers []base.Invoker) base.Invoker {
	t.Helper()
	c, err := extension.GetCluster(kind)
	if err != nil {
		t.Fatal(err)
	}
	return c.Join(static.NewDirectory(invokers))
}

func call(ci base.Invoker, method string, args ...any) result.Result {
	return ci.Invoke(context.Background(), invocation.NewRPCInvocation(method, args, nil))
}

// runs numbers the calls of serviceName: `go test -count=N` runs a test again
// in the same process, where the extensions' state persists.
var runs atomic.Int64

// serviceName is a service of the test's own (of this run of it), so tests
// share no state.
func serviceName(t testing.TB) string {
	return fmt.Sprintf("com.example.%s.r%d", strings.NewReplacer("/", ".", " ", "_", "=", "_").Replace(t.Name()), runs.Add(1))
}

// inFlight is polylb's calls in flight per provider address, over every
// balancer of the service.
func inFlight(t testing.TB, lbName, service string) map[string]int64 {
	t.Helper()
	stats, err := Get(lbName).Stats(service)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, s := range stats {
		for _, inv := range s.Invokers {
			out[inv.Address] += inv.Active
		}
	}
	return out
}

func assertNoneInFlight(t testing.TB, lbName, service string) {
	t.Helper()
	for addr, n := range inFlight(t, lbName, service) {
		if n != 0 {
			t.Errorf("%s: %d calls still in flight at %s", service, n, addr)
		}
	}
}

// awaitNoneInFlight is assertNoneInFlight for calls whose last reports may
// still be on their way (a forking cluster's forks that finish after the call
// returned: their provider has counted them, their filter not yet reported).
func awaitNoneInFlight(t testing.TB, lbName, service string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		drained := true
		for _, n := range inFlight(t, lbName, service) {
			drained = drained && n == 0
		}
		if drained {
			return
		}
	}
	assertNoneInFlight(t, lbName, service)
}

func addrOf(res result.Result) string { return fmt.Sprint(res.Result()) }

var _ = clusterpkg.GetClusterInterceptor

func newInvocation(method string, args ...any) *invocation.RPCInvocation {
	return invocation.NewRPCInvocation(method, args, nil)
}
