package polylbdubbo

import (
	"context"
	"fmt"
	"math"
	"testing"

	_ "dubbo.apache.org/dubbo-go/v3/cluster/loadbalance/roundrobin"
	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
)

// Method-level weights ("methods.<m>.weight", which dubbo-go's GetWeight
// reads before "weight"): polylb-roundrobin picks exactly what dubbo-go's
// own roundrobin picks, call after call, with methods interleaved, a method
// weight of 0 and a negative one (dubbo-go's default 100, not the service's
// weight).
func TestMethodWeightsPickAsDubboGoRoundRobin(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	var ps []*provider
	for i, params := range []string{
		"weight=3&methods.sayHello.weight=7",
		"weight=5&methods.sayHello.weight=1",
		"weight=7",
		"weight=11&methods.sayHello.weight=0",
		"weight=2&methods.sayHello.weight=-4&methods.bye.weight=9",
		"weight=4&methods.bye.weight=x", // not a number: the service's weight
	} {
		ps = append(ps, newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i+1), "loadbalance="+lbName+"&"+params))
	}
	list := wrapAll(ps...)
	dubbo := extension.GetLoadbalance("roundrobin")
	polylb := Get(lbName)
	methods := []string{"sayHello", "other", "sayHello", "bye", "another"}
	for i := 0; i < 3000; i++ {
		method := methods[i%len(methods)]
		want := dubbo.Select(list, newInvocation(method))
		if got := polylb.Select(list, newInvocation(method)); got != want {
			t.Fatalf("pick #%d (%s): polylb %s, dubbo-go %s", i, method,
				got.GetURL().Location, want.GetURL().Location)
		}
	}
	stats, err := polylb.Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	// The service's weights (other, another) and one set per method that
	// providers weigh on its own.
	if len(stats) != 3 {
		t.Errorf("%d balancers, want 3 (service, sayHello, bye)", len(stats))
	}
}

// Weighted random through the failover cluster: a method's own weights
// decide its calls' shares (3:1), the other methods follow the service's
// (1:3); after a refresh that gives one provider a method weight of 0, that
// method never reaches it while the others still do.
func TestMethodWeightsDecideThatMethodsShares(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-random"
	params := "loadbalance=" + lbName + "&polylb.config=seed%3D7"
	a := newProvider(t, svc, "10.0.0.1:20000", params+"&weight=100&methods.heavy.weight=300")
	b := newProvider(t, svc, "10.0.0.2:20000", params+"&weight=300&methods.heavy.weight=100")
	ci := clusterOf(t, "failover", wrapAll(a, b))
	const n = 8000
	share := func(method string) float64 {
		before := a.calls.Load()
		for i := 0; i < n; i++ {
			if res := call(ci, method); res.Error() != nil {
				t.Fatal(res.Error())
			}
		}
		return float64(a.calls.Load()-before) / n
	}
	sigma := math.Sqrt(0.75 * 0.25 / n)
	if got := share("heavy"); math.Abs(got-0.75) > 5*sigma {
		t.Errorf("heavy: %.4f of the calls on the provider it weighs 300, want 0.75 ± %.4f (5σ)", got, 5*sigma)
	}
	if got := share("light"); math.Abs(got-0.25) > 5*sigma {
		t.Errorf("light: %.4f of the calls on the provider weighted 100, want 0.25 ± %.4f (5σ)", got, 5*sigma)
	}

	// A generic call weighs as its real method (Java Dubbo's rule).
	before := a.calls.Load()
	for i := 0; i < n; i++ {
		if res := ci.Invoke(context.Background(), newInvocation("$invoke", "heavy", []string{}, []any{})); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	if got := float64(a.calls.Load()-before) / n; math.Abs(got-0.75) > 5*sigma {
		t.Errorf("generic heavy: %.4f of the calls on the provider heavy weighs 300, want 0.75 ± %.4f (5σ)", got, 5*sigma)
	}

	// A registry refresh: b's provider comes back as a new object whose
	// heavy calls weigh 0.
	b.Destroy()
	b2 := newProvider(t, svc, "10.0.0.2:20000", params+"&weight=300&methods.heavy.weight=0")
	ci = clusterOf(t, "failover", wrapAll(a, b2))
	if got := share("heavy"); got != 1 {
		t.Errorf("heavy: %.4f of the calls on 10.0.0.1 after its peer's method weight became 0, want all", got)
	}
	if got := share("light"); math.Abs(got-0.25) > 5*sigma {
		t.Errorf("light after the refresh: %.4f, want 0.25 ± %.4f (5σ)", got, 5*sigma)
	}
	assertNoneInFlight(t, lbName, svc)
}

// Methods whose weights are the service's share its balancer, whatever
// other methods' weights are; consistenthash ignores weights (as Dubbo's
// ring does), so method weights never split its state.
func TestMethodWeightsSplitStateOnlyWhereTheyMatter(t *testing.T) {
	for _, tc := range []struct {
		strategy  string
		balancers int
	}{{"leastactive", 2}, {"consistenthash", 1}} {
		t.Run(tc.strategy, func(t *testing.T) {
			svc := serviceName(t)
			lbName := "polylb-" + tc.strategy
			p := "loadbalance=" + lbName
			ci := clusterOf(t, "failover", wrapAll(
				newProvider(t, svc, "10.0.0.1:20000", p+"&weight=3&methods.sayHello.weight=7&methods.same.weight=3"),
				newProvider(t, svc, "10.0.0.2:20000", p+"&weight=5"),
				newProvider(t, svc, "10.0.0.3:20000", p+"&weight=7&methods.sayHello.weight=7")))
			for _, m := range []string{"sayHello", "other", "same", "bye"} {
				if res := call(ci, m, "k"); res.Error() != nil {
					t.Fatal(res.Error())
				}
			}
			stats, err := Get(lbName).Stats(svc)
			if err != nil {
				t.Fatal(err)
			}
			if len(stats) != tc.balancers {
				t.Errorf("%d balancers, want %d", len(stats), tc.balancers)
			}
			assertNoneInFlight(t, lbName, svc)
		})
	}
}

func TestWeightOfReadsAsDubboGo(t *testing.T) {
	for _, tc := range []struct {
		params string
		method string
		want   int32
	}{
		{"weight=5", "m", 5},
		{"weight=5&methods.m.weight=9", "m", 9},
		{"weight=5&methods.m.weight=9", "", 5},
		{"weight=5&methods.m.weight=9", "n", 5},
		{"weight=5&methods.m.weight=0", "m", 0},
		{"weight=5&methods.m.weight=-1", "m", 100}, // a number: dubbo-go's default, not the service's
		{"weight=5&methods.m.weight=x", "m", 5},
		{"methods.m.weight=-1&registry.label=true&registry.weight=7", "m", 7},
		{"registry.label=true&registry.weight=7", "m", 7},
		{"", "m", 100},
	} {
		u, err := common.NewURL("tri://10.0.0.1:20000/s?" + tc.params)
		if err != nil {
			t.Fatal(err)
		}
		if got := weightOf(u, tc.method); got != tc.want {
			t.Errorf("%q for %q: weight %d, want %d", tc.params, tc.method, got, tc.want)
		}
	}
}

// A refresh whose new object of a provider is still connecting keeps the
// old, live object as the member (with the old weights); once the old one is
// destroyed and the new one is up, the set takes the new object and its
// weights, the list's size unchanged throughout.
func TestWeightsOfAReplacementThatWasConnecting(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-random"
	params := "loadbalance=" + lbName + "&polylb.config=seed%3D3"
	oldA := newProvider(t, svc, "10.0.0.1:20000", params+"&weight=300")
	b := newProvider(t, svc, "10.0.0.2:20000", params+"&weight=100")
	bWrapped := withFilters(b)
	ci := clusterOf(t, "failover", []base.Invoker{withFilters(oldA), bWrapped})
	for i := 0; i < 10; i++ {
		call(ci, "m")
	}
	newA := newProvider(t, svc, "10.0.0.1:20000", params+"&weight=100")
	newA.down.Store(true) // connecting
	ci = clusterOf(t, "failover", []base.Invoker{withFilters(newA), bWrapped})
	for i := 0; i < 10; i++ {
		call(ci, "m")
	}
	oldA.Destroy()
	newA.down.Store(false)
	const n = 4000
	before := newA.calls.Load()
	for i := 0; i < n; i++ {
		if res := call(ci, "m"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	got := float64(newA.calls.Load()-before) / n
	sigma := math.Sqrt(0.25 / n)
	if math.Abs(got-0.5) > 5*sigma {
		t.Errorf("10.0.0.1 got %.3f of the calls, want its new weight's 0.5 ± %.3f (the old weight gives 0.75)", got, 5*sigma)
	}
	assertNoneInFlight(t, lbName, svc)
}
