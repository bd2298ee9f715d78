package polylbdubbo_test

import (
	"context"
	"fmt"
	"log"

	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"
	"dubbo.apache.org/dubbo-go/v3/protocol/protocolwrapper"

	"github.com/polylb/polylb/bindings/go/polylbdubbo"
)

// dubbo-go's failover cluster over three providers weighted 3:1:1, balanced
// by polylb-roundrobin. The URL parameters are what a reference configured
// with loadbalance "polylb-roundrobin" and filter "polylb" puts on its
// provider URLs; the filter chain is built as dubbo-go's protocol wrapper
// builds it. README.md shows this function's body.
func Example() {
	cluster, err := extension.GetCluster("failover")
	if err != nil {
		log.Fatal(err)
	}
	var invokers []base.Invoker
	for _, p := range []string{"10.0.0.1:20000?weight=300", "10.0.0.2:20000?weight=100", "10.0.0.3:20000?weight=100"} {
		u, err := common.NewURL("tri://" + p + "&interface=com.example.Greeter" +
			"&loadbalance=polylb-roundrobin&reference.filter=polylb")
		if err != nil {
			log.Fatal(err)
		}
		provider := answering{base.NewBaseInvoker(u)}
		invokers = append(invokers, protocolwrapper.BuildInvokerChain(provider, "reference.filter"))
	}
	greeter := cluster.Join(staticDirectory(invokers))

	for i := 0; i < 5; i++ {
		res := greeter.Invoke(context.Background(), invocation.NewRPCInvocation("SayHello", []any{"world"}, nil))
		fmt.Println(res.Result())
	}
	stats, err := polylbdubbo.Get("polylb-roundrobin").Stats("com.example.Greeter")
	if err != nil {
		log.Fatal(err)
	}
	for _, inv := range stats[0].Invokers {
		fmt.Printf("%s: weight %d, selected %d, succeeded %d, in flight %d\n",
			inv.Address, inv.Weight, inv.Selected, inv.Succeeded, inv.Active)
	}
	// Output:
	// 10.0.0.1:20000
	// 10.0.0.2:20000
	// 10.0.0.1:20000
	// 10.0.0.3:20000
	// 10.0.0.1:20000
	// 10.0.0.1:20000: weight 300, selected 3, succeeded 3, in flight 0
	// 10.0.0.2:20000: weight 100, selected 1, succeeded 1, in flight 0
	// 10.0.0.3:20000: weight 100, selected 1, succeeded 1, in flight 0
}
