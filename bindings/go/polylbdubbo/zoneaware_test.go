package polylbdubbo

import (
	"fmt"
	"testing"

	_ "dubbo.apache.org/dubbo-go/v3/cluster/cluster/zoneaware"
	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
)

// registryInvoker is what dubbo-go's registry protocol returns for one
// registry of a multi-registry reference: a cluster invoker over that
// registry's providers, whose URL is the registry's.
type registryInvoker struct {
	base.Invoker
	url *common.URL
}

func (r registryInvoker) GetURL() *common.URL { return r.url }

// newRegistryInvoker wraps the cluster invoker of one registry's providers
// of service, with the registry's URL as dubbo-go's registry protocol makes
// it (the reference's URL as its SubURL).
func newRegistryInvoker(t *testing.T, inner base.Invoker, service, addr, params string) registryInvoker {
	t.Helper()
	u, err := common.NewURL("zookeeper://" + addr + "/org.apache.dubbo.registry.RegistryService?registry=zookeeper" + params)
	if err != nil {
		t.Fatal(err)
	}
	if u.SubURL, err = common.NewURL("consumer://10.0.2.1/" + service + "?interface=" + service); err != nil {
		t.Fatal(err)
	}
	return registryInvoker{inner, u}
}

// A reference with two registries (dubbo-go's zoneAware cluster over one
// failover cluster per registry): polylb balances each registry's providers
// and reports every call; with polylb also choosing the registry (a
// registry URL that names it), the registry-level picks are released when
// the call ends and never mix with the providers' state.
func TestMultiRegistryReference(t *testing.T) {
	for _, tc := range []struct{ name, registryLB string }{
		{"random-over-registries", ""},
		{"polylb-over-registries", "&loadbalance=polylb-roundrobin"},
	} {
		registryLB := tc.registryLB
		t.Run(tc.name, func(t *testing.T) {
			svc := serviceName(t)
			const lbName = "polylb-roundrobin"
			var ps []*provider
			for i := 1; i <= 4; i++ {
				ps = append(ps, newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i), "loadbalance="+lbName))
			}
			regA := newRegistryInvoker(t, clusterOf(t, "failover", wrapAll(ps[0], ps[1])), svc, "10.0.1.1:2181", registryLB)
			regB := newRegistryInvoker(t, clusterOf(t, "failover", wrapAll(ps[2], ps[3])), svc, "10.0.1.2:2181", registryLB)
			ci := clusterOf(t, constant.ClusterKeyZoneAware, []base.Invoker{regA, regB})
			const n = 400
			for i := 0; i < n; i++ {
				if res := call(ci, "sayHello"); res.Error() != nil {
					t.Fatal(res.Error())
				}
			}
			perRegistry := [2]int64{ps[0].calls.Load() + ps[1].calls.Load(), ps[2].calls.Load() + ps[3].calls.Load()}
			if perRegistry[0]+perRegistry[1] != n {
				t.Fatalf("registries got %v calls, want %d in all", perRegistry, n)
			}
			for r, reg := range [][2]*provider{{ps[0], ps[1]}, {ps[2], ps[3]}} {
				// polylb-roundrobin inside each registry: its two providers alternate.
				if a, b := reg[0].calls.Load(), reg[1].calls.Load(); a-b > 1 || b-a > 1 {
					t.Errorf("registry %d: providers got %d and %d calls, want round robin's 1:1", r, a, b)
				}
			}
			if registryLB != "" && perRegistry[0] != n/2 {
				t.Errorf("polylb-roundrobin over the registries: %v calls, want %d each", perRegistry, n/2)
			}
			stats, err := Get(lbName).Stats(svc)
			if err != nil || len(stats) != 1 {
				t.Fatalf("stats of %s: %v, %v", svc, stats, err)
			}
			var succeeded uint64
			for _, inv := range stats[0].Invokers {
				if inv.Address == "10.0.1.1:2181" || inv.Address == "10.0.1.2:2181" {
					t.Errorf("a registry is in the providers' set: %+v", inv)
				}
				succeeded += inv.Succeeded
			}
			if succeeded != n {
				t.Errorf("%d successes reported, want %d", succeeded, n)
			}
			assertNoneInFlight(t, lbName, svc)
			regStats, err := Get(lbName).Stats("registries of " + svc)
			if err != nil {
				t.Fatal(err)
			}
			if registryLB != "" && (len(regStats) != 1 || len(regStats[0].Invokers) != 2) {
				t.Errorf("the registries' state: %+v, want one balancer over the two registries", regStats)
			}
			for _, s := range regStats {
				for _, inv := range s.Invokers {
					if inv.Active != 0 {
						t.Errorf("registry %s: %d picks still in flight", inv.Address, inv.Active)
					}
				}
			}
		})
	}
}

// Services sharing the same registries, each with polylb choosing among
// them: each reference's registries are a state of their own, so the calls
// of one service never replace the set another's calls select from (it was
// one state for all, whose set was rebuilt on about every other call once
// more than four services took turns).
func TestRegistriesOfManyServicesDoNotShareAState(t *testing.T) {
	const lbName = "polylb-roundrobin"
	var clusters []base.Invoker
	var services []string
	for s := 0; s < 6; s++ {
		svc := serviceName(t)
		services = append(services, svc)
		a := newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName)
		b := newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName)
		regA := newRegistryInvoker(t, clusterOf(t, "failover", wrapAll(a)), svc, "10.0.1.1:2181", "&loadbalance="+lbName)
		regB := newRegistryInvoker(t, clusterOf(t, "failover", wrapAll(b)), svc, "10.0.1.2:2181", "&loadbalance="+lbName)
		clusters = append(clusters, clusterOf(t, constant.ClusterKeyZoneAware, []base.Invoker{regA, regB}))
	}
	for i := 0; i < 600; i++ {
		if res := call(clusters[i%len(clusters)], "sayHello"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	for _, svc := range services {
		v, ok := Get(lbName).services.Load("registries of " + svc)
		if !ok {
			t.Fatalf("no state for the registries of %s", svc)
		}
		if gen := v.(*serviceState).set.Load().gen; gen != 0 {
			t.Errorf("the registries of %s: set rebuilt %d times for 100 calls, want never", svc, gen)
		}
	}
}

// Two registries at one address (two namespaces of one registry server) are
// two registries, not one provider seen twice.
func TestRegistriesAtOneAddressAreDistinct(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	a := newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName)
	b := newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName)
	regA := newRegistryInvoker(t, clusterOf(t, "failover", wrapAll(a)), svc, "10.0.1.1:8848", "&namespace=blue&loadbalance="+lbName)
	regB := newRegistryInvoker(t, clusterOf(t, "failover", wrapAll(b)), svc, "10.0.1.1:8848", "&namespace=green&loadbalance="+lbName)
	ci := clusterOf(t, constant.ClusterKeyZoneAware, []base.Invoker{regA, regB})
	for i := 0; i < 100; i++ {
		if res := call(ci, "sayHello"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	if a.calls.Load() != 50 || b.calls.Load() != 50 {
		t.Errorf("the two namespaces got %d and %d calls, want round robin's 50 each", a.calls.Load(), b.calls.Load())
	}
}
