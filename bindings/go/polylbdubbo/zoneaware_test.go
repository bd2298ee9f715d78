package polylbdubbo

import (
	"fmt"
	"testing"

	_ "dubbo.apache.org/dubbo-go/v3/cluster/cluster/zoneaware"
	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
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

// groupsDirectory lists a multi-group reference's groups under the
// reference's URL (group "*"), as RegistryDirectory does: routed by a
// group's URL, as a static directory over them would be, the list kept that
// group only.
type groupsDirectory struct {
	url    *common.URL
	groups []base.Invoker
}

func (d *groupsDirectory) List(base.Invocation) []base.Invoker { return d.groups }
func (d *groupsDirectory) GetURL() *common.URL                 { return d.url }
func (d *groupsDirectory) IsAvailable() bool                   { return true }
func (d *groupsDirectory) Destroy()                            {}
func (d *groupsDirectory) Subscribe(*common.URL) error         { return nil }

// joinGroups is a multi-group reference (group="*") to svc over clusters, one
// cluster invoker per group, as dubbo-go's failover cluster joins them.
func joinGroups(t *testing.T, svc string, clusters []base.Invoker) base.Invoker {
	t.Helper()
	c, err := extension.GetCluster("failover")
	if err != nil {
		t.Fatal(err)
	}
	reference, err := common.NewURL("consumer://10.0.2.1/" + svc + "?interface=" + svc + "&group=*")
	if err != nil {
		t.Fatal(err)
	}
	return c.Join(&groupsDirectory{url: reference, groups: clusters})
}

// A reference to several groups (group "*" or "a,b"): dubbo-go's
// RegistryDirectory.toGroupInvokers lists one cluster invoker per group
// (cluster.Join over a static directory of the group's providers), whose URL
// is the group's first provider's URL object. polylb chooses among the
// groups in a state of their own ("groups of <interface>"), whose members
// are the groups, and within each group among its providers: every provider
// gets its share (group A's first provider got no call when the groups'
// select went into group A's state and the group took that provider's id),
// every call is reported once in its group's state, none in the groups'
// (group C's lone provider, which its cluster calls without a select, must
// not take the group's pick, which shares its URL), nothing stays in flight.
// Group B's first provider shares group A's first provider's address (one
// process exporting the service in both groups): still two groups.
func TestMultiGroupReference(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	const n = 600 // 200 a group, round robin over the 3
	groups := []struct {
		name  string
		addrs []string
	}{
		{"A", []string{"10.0.0.1:20000", "10.0.0.2:20000"}},
		{"B", []string{"10.0.0.1:20000", "10.0.0.3:20000"}},
		{"C", []string{"10.0.0.4:20000"}},
	}
	var ps [][]*provider
	var clusters []base.Invoker
	for _, g := range groups {
		var members []*provider
		for _, addr := range g.addrs {
			members = append(members, newProvider(t, svc, addr, "group="+g.name+"&loadbalance="+lbName))
		}
		ps = append(ps, members)
		clusters = append(clusters, clusterOf(t, "failover", wrapAll(members...)))
	}
	if identity(ps[0][0].GetURL()) != identity(ps[1][0].GetURL()) || clusters[0].GetURL() != ps[0][0].GetURL() {
		t.Fatal("groups A and B's first providers should share an identity, and a group's cluster invoker its first provider's URL, as in dubbo-go")
	}
	ci := joinGroups(t, svc, clusters)
	for i := 0; i < n; i++ {
		if res := call(ci, "sayHello"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	for g, members := range ps {
		want := int64(n / len(groups) / len(members))
		for _, p := range members {
			if got := p.calls.Load(); got != want {
				t.Errorf("group %s, %s: %d calls, want round robin's %d (1:1 between the groups, 1:1 within each)",
					groups[g].name, p.GetURL().Location, got, want)
			}
		}
		if len(members) == 1 {
			continue // never balanced (no select among one), so no state to count in
		}
		key := groups[g].name + "/" + svc
		stats, err := Get(lbName).Stats(key)
		if err != nil || len(stats) != 1 {
			t.Fatalf("stats of %s: %v, %v", key, stats, err)
		}
		if len(stats[0].Invokers) != len(members) {
			t.Errorf("%s: %d providers in the set, want its %d", key, len(stats[0].Invokers), len(members))
		}
		for _, inv := range stats[0].Invokers {
			if inv.Succeeded != uint64(want) || inv.Active != 0 {
				t.Errorf("%s: %s succeeded %d, %d in flight; want %d, none", key, inv.Address, inv.Succeeded, inv.Active, want)
			}
		}
	}
	stats, err := Get(lbName).Stats("groups of " + svc)
	if err != nil || len(stats) != 1 || len(stats[0].Invokers) != len(groups) {
		t.Fatalf("the groups' state: %+v, %v; want one balancer over the %d groups", stats, err, len(groups))
	}
	for _, g := range stats[0].Invokers {
		if g.Selected != n/3 || g.Succeeded != 0 || g.Active != 0 {
			t.Errorf("group at %s: selected %d, succeeded %d, %d in flight; want selected %d, succeeded 0 (the providers' calls are what is reported), none in flight",
				g.Address, g.Selected, g.Succeeded, g.Active, n/3)
		}
	}
}
