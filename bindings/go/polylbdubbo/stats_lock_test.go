package polylbdubbo

import (
	"testing"
	"time"
)

// Stats takes no lock a select or a set change takes: a stats call over a
// large set (tenths of a second) held the service's lock, and a concurrent
// set change or a method's first select waited for it. Here the lock is held
// by the test, as a set change would hold it, and Stats still answers.
func TestStatsDoNotWaitForTheServicesLock(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-random"
	params := "loadbalance=" + lbName
	pa := newProvider(t, svc, "10.0.0.1:20000", params)
	pb := newProvider(t, svc, "10.0.0.2:20000", params)
	ci := clusterOf(t, "failover", wrapAll(pa, pb))
	for i := 0; i < 10; i++ {
		if res := call(ci, "sayHello"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	v, ok := Get(lbName).services.Load(svc)
	if !ok {
		t.Fatal("no state for the service")
	}
	st := v.(*serviceState)
	st.mu.Lock()
	done := make(chan int, 1)
	go func() {
		stats, err := Get(lbName).Stats(svc)
		if err != nil {
			t.Error(err)
		}
		calls := 0
		for _, s := range stats {
			for _, inv := range s.Invokers {
				calls += int(inv.Selected)
			}
		}
		done <- calls
	}()
	select {
	case calls := <-done:
		st.mu.Unlock()
		if calls != 10 {
			t.Errorf("stats counted %d selects, want 10", calls)
		}
	case <-time.After(10 * time.Second):
		st.mu.Unlock()
		<-done
		t.Fatal("Stats waited for the service's lock")
	}
	// A swept state's balancers are closed: its stats leave them out
	// rather than failing.
	st.retire()
	if stats, err := Get(lbName).Stats(svc); err != nil || len(stats) != 0 {
		t.Errorf("stats of a swept state: %d documents, error %v; want none, no error", len(stats), err)
	}
}
