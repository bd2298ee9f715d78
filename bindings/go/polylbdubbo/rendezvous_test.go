package polylbdubbo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"

	polylb "github.com/polylb/polylb/bindings/go"
)

// rendezvousReference is where a polylb rendezvous balancer over addrs sends
// each key: what every consumer of those providers picks.
func rendezvousReference(t *testing.T, addrs []string, keys []string) map[string]string {
	t.Helper()
	lb, err := polylb.New("loadbalance=rendezvous")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	var set []polylb.Invoker
	for i, addr := range addrs {
		set = append(set, polylb.NewInvoker(uint64(i+1), addr))
	}
	if err := lb.Update(set); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, key := range keys {
		id, err := lb.Select(polylb.ServiceLevel, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.Report(polylb.ServiceLevel, id, time.Millisecond, polylb.Success); err != nil {
			t.Fatal(err)
		}
		out[key] = addrs[id-1]
	}
	return out
}

// rendezvousProviders starts 4 providers of svc at 10.0.0.1..4:20000 with
// URL params, and names 64 keys user-0..user-63 to route over them.
func rendezvousProviders(t *testing.T, svc, params string) (addrs []string, ps []*provider, keys []string) {
	t.Helper()
	addrs = []string{"10.0.0.1:20000", "10.0.0.2:20000", "10.0.0.3:20000", "10.0.0.4:20000"}
	for _, addr := range addrs {
		ps = append(ps, newProvider(t, svc, addr, params))
	}
	for k := 0; k < 64; k++ {
		keys = append(keys, fmt.Sprintf("user-%d", k))
	}
	return addrs, ps, keys
}

// A failing provider's keys are retried (failover) on their next choice: the
// provider a consumer that never knew the failing one picks, so retries of a
// key from every consumer land together. Keys of the other providers never
// touch the failing one.
func TestRendezvousFailoverRetriesOnTheKeysNextChoice(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-rendezvous"
	addrs, ps, keys := rendezvousProviders(t, svc, "loadbalance="+lbName+"&retries=2")
	bad := ps[1]
	bad.fn = func(ctx context.Context, inv base.Invocation) result.Result {
		return &result.RPCResult{Err: errors.New("connection refused")}
	}
	first := rendezvousReference(t, addrs, keys)
	without := rendezvousReference(t, []string{addrs[0], addrs[2], addrs[3]}, keys)
	ci := clusterOf(t, "failover", wrapAll(ps...))
	var badKeys int64
	for _, key := range keys {
		before := bad.calls.Load()
		res := call(ci, "get", key)
		if res.Error() != nil {
			t.Fatalf("key %s: %v", key, res.Error())
		}
		if got := addrOf(res); got != without[key] {
			t.Fatalf("key %s answered by %s; rendezvous without %s sends it to %s", key, got, addrs[1], without[key])
		}
		tried := bad.calls.Load() - before
		if (first[key] == addrs[1]) != (tried == 1) || tried > 1 {
			t.Fatalf("key %s (first choice %s) tried the failing provider %d times", key, first[key], tried)
		}
		badKeys += tried
	}
	if badKeys == 0 {
		t.Error("no key's first choice was the failing provider: the test proves nothing")
	}
	assertNoneInFlight(t, lbName, svc)
}

// A provider a router leaves out of a call's list is not a candidate, and
// its keys go where they go on a consumer without it; every other key stays
// on its provider. The set is not rebuilt for the call.
func TestRendezvousRoutedAwayProviderMovesOnlyItsKeys(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-rendezvous"
	addrs, ps, keys := rendezvousProviders(t, svc, "loadbalance="+lbName+"&hash.arguments=1")
	invokers := wrapAll(ps...)
	all := rendezvousReference(t, addrs, keys)
	routed := rendezvousReference(t, []string{addrs[0], addrs[1], addrs[3]}, keys)
	full := clusterOf(t, "failover", invokers)
	partial := clusterOf(t, "failover", []base.Invoker{invokers[0], invokers[1], invokers[3]})
	moved := 0
	for _, key := range keys {
		if got := addrOf(call(full, "get", "ignored", key)); got != all[key] {
			t.Fatalf("key %s went to %s, want %s", key, got, all[key])
		}
		got := addrOf(call(partial, "get", "ignored", key))
		if got != routed[key] {
			t.Fatalf("key %s went to %s with %s routed away, want %s", key, got, addrs[2], routed[key])
		}
		if all[key] != addrs[2] && got != all[key] {
			t.Fatalf("key %s moved from %s to %s though its provider was in the list", key, all[key], got)
		}
		if got != all[key] {
			moved++
		}
	}
	if moved == 0 {
		t.Error("no key was on the routed-away provider: the test proves nothing")
	}
	stats, err := Get(lbName).Stats(svc)
	if err != nil || len(stats) != 1 || len(stats[0].Invokers) != 4 {
		t.Errorf("the routed call changed polylb's set: %+v, %v", stats, err)
	}
	assertNoneInFlight(t, lbName, svc)
}
