package polylbdubbo

import (
	"fmt"
	"testing"
	"time"
)

// Forking with round robin: the forks of each call go where dubbo-go's own
// roundrobin sends them, every provider its share. The second fork's select
// used to skip the first fork's provider, which advanced only the other
// providers' turns: with 2 forks over 3 providers, one provider got every
// call (300 of 300, the others 150 each).
func TestForkingRoundRobinKeepsTheSequence(t *testing.T) {
	calls := func(lbName string, weights []int) []int64 {
		svc := serviceName(t)
		var ps []*provider
		for i, w := range weights {
			ps = append(ps, newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i+1),
				fmt.Sprintf("loadbalance=%s&forks=2&weight=%d", lbName, w)))
		}
		ci := clusterOf(t, "forking", wrapAll(ps...))
		for i := 0; i < 300; i++ {
			if res := call(ci, "sayHello"); res.Error() != nil {
				t.Fatal(res.Error())
			}
		}
		// The forks still running when their call returned.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			var n int64
			for _, p := range ps {
				n += p.calls.Load()
			}
			if n == 600 || time.Now().After(deadline) {
				break
			}
		}
		out := make([]int64, len(ps))
		for i, p := range ps {
			out[i] = p.calls.Load()
		}
		if lbName != "roundrobin" {
			awaitNoneInFlight(t, lbName, svc)
		}
		return out
	}
	for _, weights := range [][]int{{100, 100, 100}, {300, 100, 100, 200}} {
		got := calls("polylb-roundrobin", weights)
		want := calls("roundrobin", weights)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("weights %v: calls per provider %v, dubbo-go's roundrobin %v", weights, got, want)
		}
	}
}
