package polylbdubbo

import (
	"fmt"
	"strings"
	"testing"

	clusterpkg "dubbo.apache.org/dubbo-go/v3/cluster/cluster"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
)

func TestEveryStrategyIsRegistered(t *testing.T) {
	names := []string{Name}
	for _, s := range Strategies {
		names = append(names, Name+"-"+s)
	}
	for _, name := range names {
		lb := extension.GetLoadbalance(name)
		if lb != Get(name) {
			t.Errorf("%s: dubbo-go's registry returns %v, not the package's extension", name, lb)
		}
		// The same instance every time: dubbo-go asks on every invocation.
		if extension.GetLoadbalance(name) != lb {
			t.Errorf("%s: a new LoadBalance per lookup would lose its state", name)
		}
	}
	if _, ok := extension.GetFilter(Name); !ok {
		t.Error("filter polylb is not registered")
	}
	if _, ok := clusterpkg.GetClusterInterceptor(Name).(interceptor); !ok {
		t.Error("cluster interceptor polylb is not registered")
	}
}

func TestEveryStrategyBalancesThroughTheCluster(t *testing.T) {
	for _, strategy := range Strategies {
		t.Run(strategy, func(t *testing.T) {
			svc := serviceName(t)
			lbName := Name + "-" + strategy
			ps := []*provider{
				newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName),
				newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName),
				newProvider(t, svc, "10.0.0.3:20000", "loadbalance="+lbName),
			}
			ci := clusterOf(t, "failover", wrapAll(ps...))
			for i := 0; i < 300; i++ {
				if res := call(ci, "sayHello", "user-"+string(rune('a'+i%26))); res.Error() != nil {
					t.Fatal(res.Error())
				}
			}
			stats, err := Get(lbName).Stats(svc)
			if err != nil || len(stats) != 1 {
				t.Fatalf("stats: %v, %v", stats, err)
			}
			if stats[0].Strategy != strategy {
				t.Errorf("strategy %q, want %q", stats[0].Strategy, strategy)
			}
			var total uint64
			for _, inv := range stats[0].Invokers {
				total += inv.Succeeded
			}
			if total != 300 {
				t.Errorf("%d successes reported, want 300 (one per call)", total)
			}
			assertNoneInFlight(t, lbName, svc)
		})
	}
}

func TestGenericExtensionReadsTheStrategyParameter(t *testing.T) {
	svc := serviceName(t)
	params := "loadbalance=polylb&polylb.strategy=roundrobin&methods.sayBye.polylb.strategy=leastactive"
	ci := clusterOf(t, "failover", wrapAll(
		newProvider(t, svc, "10.0.0.1:20000", params),
		newProvider(t, svc, "10.0.0.2:20000", params)))
	call(ci, "sayHello")
	call(ci, "sayBye")
	stats, err := Get(Name).Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range stats {
		got = append(got, s.Strategy)
	}
	joined := strings.Join(got, ",")
	if len(got) != 2 || !strings.Contains(joined, "roundrobin") || !strings.Contains(joined, "leastactive") {
		t.Errorf("balancers %v, want one roundrobin (service level) and one leastactive (method sayBye)", got)
	}
}

// A configuration polylb rejects fails every call with an error naming the
// parameter: no panic (it would take the consumer's process down), no
// provider picked by another strategy, no provider marked unhealthy.
func TestBadConfigurationFailsTheCallNamingIt(t *testing.T) {
	for _, tc := range []struct{ params, want string }{
		{"polylb.strategy=fastest", "fastest"},
		{"polylb.strategy=consistenthash&hash.arguments=0,x", "hash.arguments"},
		{"polylb.strategy=maglev&hash.arguments=0,x", "argument index"}, // (a second "hash.arguments" would name the subtest hash.arguments#01, and '#' cut the URL)
		{"polylb.strategy=maglev&polylb.config=maglev.tableSize%3D65536", "maglev.tableSize"},
		{"polylb.strategy=rendezvous&polylb.config=slowstart.windowMs%3D1000", "slowstart.windowMs"},
		{"polylb.config=seed%3Dabc", "seed"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			svc := serviceName(t)
			ps := []*provider{newProvider(t, svc, "10.0.0.1:20000", "loadbalance=polylb&"+tc.params),
				newProvider(t, svc, "10.0.0.2:20000", "loadbalance=polylb&"+tc.params)}
			invokers := wrapAll(ps...)
			res := call(clusterOf(t, "failover", invokers), "sayHello")
			if res.Error() == nil || !strings.Contains(res.Error().Error(), tc.want) {
				t.Fatalf("call error %v, want one naming %q", res.Error(), tc.want)
			}
			for i, ivk := range invokers {
				if !base.GetInvokerHealthyStatus(ivk) {
					t.Errorf("%s marked unhealthy", ivk.GetURL().Location)
				}
				if n := ps[i].calls.Load(); n != 0 {
					t.Errorf("%s called %d times", ivk.GetURL().Location, n)
				}
			}
		})
	}
}

// A misspelt adapter key (within two edits of polylb.strategy or
// polylb.config, also after methods.<m>.) fails the call with an error naming
// it and the key meant, as the Java adapter's does: ignored, it left the
// default strategy or configuration in place without a word. Keys that are
// no near miss (a method named polylb's polylb.timeout, keys of a later
// adapter) pass.
func TestMisspeltAdapterKeyFailsTheCallNamingIt(t *testing.T) {
	for _, tc := range []struct{ name, params, want string }{
		{"strategy", "polylb.strateg=roundrobin", "unknown URL parameter 'polylb.strateg' for %s.sayHello; did you mean 'polylb.strategy'?"},
		{"config", "polylb.confg=seed%253D1", "unknown URL parameter 'polylb.confg' for %s.sayHello; did you mean 'polylb.config'?"},
		{"case", "polylb.Strategy=roundrobin", "did you mean 'polylb.strategy'?"},
		{"method level", "methods.sayHello.polylb.stratgy=roundrobin", "unknown URL parameter 'methods.sayHello.polylb.stratgy' for %s.sayHello; did you mean 'methods.sayHello.polylb.strategy'?"},
		{"another method's", "methods.other.polylb.confi=seed%253D1", "did you mean 'methods.other.polylb.config'?"},
		{"no near miss", "polylb.timeout=100&polylb.weights=x&methods.polylb.timeout=1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := serviceName(t)
			ps := []*provider{newProvider(t, svc, "10.0.0.1:20000", "loadbalance=polylb&"+tc.params),
				newProvider(t, svc, "10.0.0.2:20000", "loadbalance=polylb&"+tc.params)}
			res := call(clusterOf(t, "failover", wrapAll(ps...)), "sayHello")
			if tc.want == "" {
				if res.Error() != nil {
					t.Fatalf("call error %v, want none", res.Error())
				}
				return
			}
			want := tc.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, svc)
			}
			if res.Error() == nil || !strings.Contains(res.Error().Error(), want) {
				t.Fatalf("call error %v, want one saying %q", res.Error(), want)
			}
			if n := ps[0].calls.Load() + ps[1].calls.Load(); n != 0 {
				t.Errorf("providers called %d times", n)
			}
		})
	}
}

// A set maglev's table cannot hold (more providers than maglev.tableSize
// slots) is the library's LIMIT_EXCEEDED: the call fails naming the key,
// and no provider is called.
func TestMaglevSetLargerThanItsTableFailsTheCall(t *testing.T) {
	svc := serviceName(t)
	params := "loadbalance=polylb-maglev&polylb.config=maglev.tableSize%3D7"
	var ps []*provider
	for i := 1; i <= 8; i++ {
		ps = append(ps, newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i), params))
	}
	res := call(clusterOf(t, "failover", wrapAll(ps...)), "sayHello", "user-1")
	if res.Error() == nil || !strings.Contains(res.Error().Error(), "maglev.tableSize") ||
		!strings.Contains(res.Error().Error(), "LIMIT_EXCEEDED") {
		t.Fatalf("call error %v, want LIMIT_EXCEEDED naming maglev.tableSize", res.Error())
	}
	for _, p := range ps {
		if n := p.calls.Load(); n != 0 {
			t.Errorf("a provider was called %d times", n)
		}
	}
	// Seven fit.
	svc = serviceName(t)
	ps = ps[:0]
	for i := 1; i <= 7; i++ {
		ps = append(ps, newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i), params))
	}
	if res := call(clusterOf(t, "failover", wrapAll(ps...)), "sayHello", "user-1"); res.Error() != nil {
		t.Fatal(res.Error())
	}
}

// Two references to one service, each with its own parameters for the same
// providers, share the service's state; each call reads its own reference's
// configuration, as dubbo-go's balancers read each call's URLs. Before, the
// binding made for one reference served the other: round robin's calls went
// where the other reference's consistent hashing sent them.
func TestTwoReferencesToOneServiceKeepTheirOwnConfiguration(t *testing.T) {
	svc := serviceName(t)
	lb := Get(Name)
	var a, b []*provider
	for i := 1; i <= 4; i++ {
		addr := fmt.Sprintf("10.0.0.%d:20000", i)
		a = append(a, newProvider(t, svc, addr, "polylb.strategy=roundrobin"))
		b = append(b, newProvider(t, svc, addr, "polylb.strategy=consistenthash&hash.arguments=0"))
	}
	refA, refB := wrapAll(a...), wrapAll(b...)
	lb.Select(refA, newInvocation("get", "user-1"))
	hashed := map[string]int{}
	for i := 0; i < 40; i++ {
		hashed[lb.Select(refB, newInvocation("get", "user-1")).GetURL().Location]++
	}
	if len(hashed) != 1 {
		t.Errorf("reference B (consistenthash, one key): %v, want one provider", hashed)
	}
	dealt := map[string]int{}
	for i := 0; i < 40; i++ {
		dealt[lb.Select(refA, newInvocation("get", "user-1")).GetURL().Location]++
	}
	if len(dealt) != 4 {
		t.Errorf("reference A (roundrobin): %v, want all four providers in turn", dealt)
	}
}
