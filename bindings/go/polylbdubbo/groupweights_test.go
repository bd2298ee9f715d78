package polylbdubbo

import (
	"fmt"
	"testing"
	"time"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
)

// A group of a multi-group reference is chosen as a whole: the provider whose
// URL its cluster invoker carries (its first) says nothing of the group's
// start. A group whose first provider restarted a moment ago (its timestamp
// recent, warm-up 600 s) keeps its share among the groups, as under dubbo-go's
// own balancers (they read remote.timestamp, never set: no warm-up) and as the
// Java adapter treats a cluster invoker (its registry weight, no warm-up);
// within the group that provider warms up.
func TestGroupsDoNotWarmUpByTheirFirstProvider(t *testing.T) {
	started := time.Now().Add(-30 * time.Second).UnixMilli() // 30 s of a 600-s warm-up
	groupShares(t, fmt.Sprintf("timestamp=%d", started), "", "")
}

// Nor are groups placed in their first provider's zone: with polylb.config's
// zone=zone-a, a group whose first provider runs in zone-b (its second in
// zone-a) got no call at all.
func TestGroupsAreNotZonedByTheirFirstProvider(t *testing.T) {
	groupShares(t, "zone=zone-b", "zone=zone-a", "&polylb.config=zone%253Dzone-a")
}

// groupShares calls a reference to groups A, B and C (two providers each;
// group A's first provider has the parameters firstOfA, every other one
// others; each config) 600 times and checks that each group gets a third.
func groupShares(t *testing.T, firstOfA, others, config string) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	const n = 600
	groups := []struct {
		name   string
		params []string
	}{
		{"A", []string{firstOfA, others}},
		{"B", []string{others, others}},
		{"C", []string{others, others}},
	}
	var ps [][]*provider
	var clusters []base.Invoker
	for g, grp := range groups {
		var members []*provider
		for i, extra := range grp.params {
			params := "group=" + grp.name + "&loadbalance=" + lbName + config
			if extra != "" {
				params += "&" + extra
			}
			members = append(members, newProvider(t, svc, fmt.Sprintf("10.0.%d.%d:20000", g+1, i+1), params))
		}
		ps = append(ps, members)
		clusters = append(clusters, clusterOf(t, "failover", wrapAll(members...)))
	}
	ci := joinGroups(t, svc, clusters)
	for i := 0; i < n; i++ {
		if res := call(ci, "sayHello"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	for g, members := range ps {
		var got int64
		for _, p := range members {
			got += p.calls.Load()
		}
		if got != n/int64(len(groups)) {
			t.Errorf("group %s: %d calls, want %d (1:1:1 between the groups, whatever their first provider's start or zone)",
				groups[g].name, got, n/len(groups))
		}
	}
	if a1, a2 := ps[0][0].calls.Load(), ps[0][1].calls.Load(); a1 >= a2 {
		t.Errorf("group A: its first provider got %d calls, its second %d; want fewer for the first (warming, or out of zone) within the group", a1, a2)
	}
}
