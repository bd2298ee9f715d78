package polylbdubbo

// The adapter beside dubbo-go's own balancers on the same invoker sets:
//
//	go test -run '^$' -bench . -benchtime 300ms -count 5
//
// polylb rows: what one call costs the adapter in dubbo-go's call path — the
// cluster interceptor's mark and release, the LoadBalance's Select, and the
// filter's Invoke (claim the pick, send, report it) and OnResponse, around a
// provider that answers at once. dubbo-go rows: its LoadBalance.Select, plus
// for leastactive base.BeginCount/EndCount, which dubbo-go's active filter
// does around each call (its leastactive reads those counts). Every row
// makes one invocation per call, as dubbo-go does.

import (
	"context"
	"fmt"
	"testing"

	_ "dubbo.apache.org/dubbo-go/v3/cluster/loadbalance/leastactive"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/loadbalance/random"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

func benchSet(b *testing.B, svc, lbName string, n int) []base.Invoker {
	answer := &result.RPCResult{Rest: "ok"}
	list := make([]base.Invoker, n)
	for i := range list {
		p := newProvider(b, svc, fmt.Sprintf("10.0.%d.%d:20880", i/250, i%250),
			fmt.Sprintf("loadbalance=%s&weight=%d", lbName, 100+(i%3)*50))
		p.fn = func(context.Context, base.Invocation) result.Result { return answer }
		list[i] = p
	}
	return list
}

func BenchmarkSelectReport(b *testing.B) {
	ctx := context.Background()
	f := &Filter{}
	for _, n := range []int{10, 100} {
		for _, strategy := range []string{"random", "leastactive", "roundrobin", "p2c"} {
			lbName := Name + "-" + strategy
			list := benchSet(b, fmt.Sprintf("com.example.Bench%s%d", strategy, n), lbName, n)
			lb := Get(lbName)
			// The cluster: select, then send through the filter.
			cluster := &clusterFunc{fn: func(ctx context.Context, inv base.Invocation) result.Result {
				chosen := lb.Select(list, inv)
				return f.OnResponse(ctx, f.Invoke(ctx, chosen, inv), chosen, inv)
			}}
			b.Run(fmt.Sprintf("polylb/%s/n=%d", strategy, n), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					inv := invocation.NewRPCInvocation("sayHello", nil, nil)
					interceptor{}.Invoke(ctx, cluster, inv)
				}
			})
		}
		for _, st := range []struct {
			name  string
			count bool
		}{{constant.LoadBalanceKeyRandom, false}, {constant.LoadBalanceKeyLeastActive, true}} {
			list := benchSet(b, fmt.Sprintf("com.example.BenchDubbo%s%d", st.name, n), st.name, n)
			lb := extension.GetLoadbalance(st.name)
			b.Run(fmt.Sprintf("dubbo-go/%s/n=%d", st.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					inv := invocation.NewRPCInvocation("sayHello", nil, nil)
					chosen := lb.Select(list, inv)
					if st.count {
						base.BeginCount(chosen.GetURL(), "sayHello")
						base.EndCount(chosen.GetURL(), "sayHello", 1, true)
					}
				}
			})
		}
	}
}
