package polylbdubbo

import (
	"fmt"
	"testing"

	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"
)

// genericInvocation is a generic call ($invoke) of method, as a gateway
// forwards one.
func genericInvocation(method string) *invocation.RPCInvocation {
	return invocation.NewRPCInvocation(constant.Generic, []any{method, []string{}, []any{}}, nil)
}

// oneAndTwo is a service of the test's own with providers weighted 1 and 2.
func oneAndTwo(t *testing.T) []base.Invoker {
	service := serviceName(t)
	return wrapAll(newProvider(t, service, "10.0.0.1:20000", "weight=1"),
		newProvider(t, service, "10.0.0.2:20000", "weight=2"))
}

// picksOfCalls counts the providers round robin picks for invs (weights 1 and
// 2: exactly 1:2 in every 3 picks of one sequence).
func picksOfCalls(lb *LoadBalance, list []base.Invoker, invs []*invocation.RPCInvocation) map[string]int {
	counts := map[string]int{}
	for _, inv := range invs {
		chosen := lb.Select(list, inv)
		if failure, bad := chosen.(*selectFailure); bad {
			panic(fmt.Sprintf("%s: select failed: %v", inv.ActualMethodName(), failure.err))
		}
		counts[chosen.GetURL().Location]++
	}
	return counts
}

// A select never fails for its method name, as dubbo-go's never does: a
// service balances maxMethodsPerService names each on its own, and new names
// past them (a gateway forwarding names its callers choose) share the service
// level, as do names the library cannot take (not UTF-8). Before, every name
// took a binding for good, and once the library's 2^20-name table was full
// every new method failed.
func TestMethodNamesPastTheCapShareTheServiceLevel(t *testing.T) {
	lb, list := Get("polylb-roundrobin"), oneAndTwo(t)
	var named []*invocation.RPCInvocation
	for i := 0; i < maxMethodsPerService; i++ {
		named = append(named, genericInvocation(fmt.Sprintf("m%d", i)))
	}
	picksOfCalls(lb, list, named)
	st := lb.state(list[0].GetURL())
	if n := st.methods.Load(); n != maxMethodsPerService {
		t.Fatalf("%d method names bound, want %d", n, maxMethodsPerService)
	}
	var past []*invocation.RPCInvocation
	for i := 0; i < 3000; i++ {
		past = append(past, genericInvocation(fmt.Sprintf("bogus%d", i)))
	}
	want := map[string]int{"10.0.0.1:20000": 1000, "10.0.0.2:20000": 2000}
	if got := picksOfCalls(lb, list, past); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("names past the cap: %v, want one shared round robin %v", got, want)
	}
	if n := st.methods.Load(); n != maxMethodsPerService+1 {
		t.Errorf("%d method names bound, want the cap and the service level", n)
	}
	// A name bound before the cap keeps its own sequence.
	m7 := []*invocation.RPCInvocation{genericInvocation("m7"), genericInvocation("m7"), genericInvocation("m7")}
	if got := picksOfCalls(lb, list, m7); got["10.0.0.1:20000"] != 1 || got["10.0.0.2:20000"] != 2 {
		t.Errorf("m7: %v", got)
	}
}

func TestAMethodNameThatIsNotUTF8IsBalancedAtTheServiceLevel(t *testing.T) {
	lb, list := Get("polylb-roundrobin"), oneAndTwo(t)
	var calls []*invocation.RPCInvocation
	for i := 0; i < 300; i++ {
		calls = append(calls, genericInvocation([]string{"say\xffHello", "a\xc3"}[i%2]))
	}
	want := map[string]int{"10.0.0.1:20000": 100, "10.0.0.2:20000": 200}
	if got := picksOfCalls(lb, list, calls); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("two names that are not UTF-8: %v, want one shared round robin %v", got, want)
	}
	st := lb.state(list[0].GetURL())
	if _, ok := st.bindings.Load(serviceLevel); !ok {
		t.Error("no service-level binding")
	}
	if _, ok := st.bindings.Load("say\xffHello"); ok {
		t.Error("a binding for a name the library cannot take")
	}
}
