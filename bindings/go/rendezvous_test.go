package polylb_test

import (
	"fmt"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// rendezvousPicks selects each of keys user-0 … user-<n-1> at the service
// level among candidates (nil: all) without excluded, and reports each call,
// so nothing is left in flight.
func rendezvousPicks(t *testing.T, lb *polylb.Balancer, n int, excluded []uint64) []uint64 {
	t.Helper()
	picks := make([]uint64, n)
	for k := range picks {
		key := []byte(fmt.Sprintf("user-%d", k))
		id, err := lb.SelectAmong(polylb.ServiceLevel, key, nil, excluded)
		if err != nil {
			t.Fatalf("SelectAmong(%q, excluding %v): %v", key, excluded, err)
		}
		if err := lb.Report(polylb.ServiceLevel, id, time.Millisecond, polylb.Success); err != nil {
			t.Fatal(err)
		}
		picks[k] = id
	}
	return picks
}

// rendezvousCrossLanguagePicks: invokers 1..8 at 10.0.0.<id>:20880, weight
// 100 each, key "user-<i>" -> this id. Computed once from the Rust library;
// the Java (RendezvousTest) and Python (test_rendezvous.py) tests assert the
// same literal, and all must agree.
var rendezvousCrossLanguagePicks = []uint64{2, 6, 7, 2, 1, 6, 8, 3, 8, 3}

func TestRendezvousCrossLanguagePicks(t *testing.T) {
	lb := newBalancer(t, "loadbalance=rendezvous", weighted(100, 100, 100, 100, 100, 100, 100, 100))
	if got := rendezvousPicks(t, lb, 10, nil); fmt.Sprint(got) != fmt.Sprint(rendezvousCrossLanguagePicks) {
		t.Errorf("user-0 … user-9 went to %v, want %v", got, rendezvousCrossLanguagePicks)
	}
	if s := stats(t, lb); s.Strategy != "rendezvous" {
		t.Errorf("strategy %q", s.Strategy)
	}
}

// Each key is a draw with exactly the invoker's share of the weight: no
// table or ring rounds the shares, so even a weight of 1 beside 99 keeps its
// 1 % (all within 5σ of the binomial over 20 000 fixed keys).
func TestRendezvousSharesFollowWeights(t *testing.T) {
	counts := func(lb *polylb.Balancer) map[uint64]int {
		c := map[uint64]int{}
		for _, id := range rendezvousPicks(t, lb, draws, nil) {
			c[id]++
		}
		return c
	}
	c := counts(newBalancer(t, "loadbalance=rendezvous", weighted(100, 200, 300, 400, 0)))
	if c[5] != 0 {
		t.Errorf("the invoker of weight 0 took %d keys while the others weigh more", c[5])
	}
	for id, p := range map[uint64]float64{1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4} {
		assertBinomial(t, fmt.Sprintf("id %d", id), c[id], draws, p)
	}
	c = counts(newBalancer(t, "loadbalance=rendezvous", weighted(99, 1)))
	assertBinomial(t, "weight 1 of 100", c[2], draws, 0.01)
	// Every weight 0: all count as equal.
	c = counts(newBalancer(t, "loadbalance=rendezvous", weighted(0, 0, 0, 0)))
	for id := uint64(1); id <= 4; id++ {
		assertBinomial(t, fmt.Sprintf("all weights 0, id %d", id), c[id], draws, 0.25)
	}
}

// The picks are a function of the addresses and weights only: another
// consumer with the set in reverse order under other ids (and another seed)
// sends every key to the same address.
func TestRendezvousKeysFollowAddressesNotIdsOrOrder(t *testing.T) {
	set := weighted(100, 200, 100, 300, 100, 100)
	var reversed []polylb.Invoker
	for i := len(set) - 1; i >= 0; i-- {
		inv := set[i]
		inv.ID += 100
		reversed = append(reversed, inv)
	}
	a := rendezvousPicks(t, newBalancer(t, "loadbalance=rendezvous", set), 2000, nil)
	b := rendezvousPicks(t, newBalancer(t, "loadbalance=rendezvous&seed=9", reversed), 2000, nil)
	for k := range a {
		if b[k] != a[k]+100 {
			t.Fatalf("key user-%d: %d on one consumer, %d on the other", k, a[k], b[k])
		}
	}
}

// An invoker that leaves moves its own keys only, spread over all the
// others; when it comes back they return; a newcomer takes keys only for
// itself, about its share.
func TestRendezvousChurnMovesOnlyTheKeysItMust(t *testing.T) {
	set := weighted(100, 100, 100, 100, 100, 100, 100, 100, 100, 100)
	lb := newBalancer(t, "loadbalance=rendezvous", set)
	const keys = 5000
	before := rendezvousPicks(t, lb, keys, nil)
	if err := lb.Update(append(append([]polylb.Invoker{}, set[:3]...), set[4:]...)); err != nil {
		t.Fatal(err)
	}
	after := rendezvousPicks(t, lb, keys, nil)
	heirs := map[uint64]bool{}
	for k, was := range before {
		switch now := after[k]; {
		case now == 4:
			t.Fatalf("key user-%d still on the invoker that left", k)
		case was == 4:
			heirs[now] = true
		case now != was:
			t.Fatalf("key user-%d moved from %d to %d though its invoker stayed", k, was, now)
		}
	}
	if len(heirs) != 9 {
		t.Errorf("the leaving invoker's keys went to %v, want all 9 others", heirs)
	}
	if err := lb.Update(set); err != nil {
		t.Fatal(err)
	}
	if back := rendezvousPicks(t, lb, keys, nil); fmt.Sprint(back) != fmt.Sprint(before) {
		t.Errorf("the invoker came back but not exactly its keys with it")
	}
	if err := lb.Update(append(append([]polylb.Invoker{}, set...), provider(11))); err != nil {
		t.Fatal(err)
	}
	taken := 0
	for k, now := range rendezvousPicks(t, lb, keys, nil) {
		switch {
		case now == 11:
			taken++
		case now != before[k]:
			t.Fatalf("key user-%d moved from %d to %d, between invokers that stayed", k, before[k], now)
		}
	}
	assertBinomial(t, "the newcomer's keys", taken, keys, 1.0/11)
}

// A failover's retry, excluding the invoker tried, is where the key goes on
// a consumer whose set lacks that invoker: every consumer's retry of a key
// lands on the same invoker. Excluding another invoker leaves the key where
// it was.
func TestRendezvousFailoverTakesTheKeysNextChoice(t *testing.T) {
	set := weighted(120, 140, 160, 180, 200, 220)
	lb := newBalancer(t, "loadbalance=rendezvous", set)
	const keys = 1000
	first := rendezvousPicks(t, lb, keys, nil)
	without := map[uint64][]uint64{} // id -> picks of a consumer told of the set without it
	for _, inv := range set {
		var rest []polylb.Invoker
		for _, other := range set {
			if other.ID != inv.ID {
				rest = append(rest, other)
			}
		}
		without[inv.ID] = rendezvousPicks(t, newBalancer(t, "loadbalance=rendezvous", rest), keys, nil)
	}
	for k := 0; k < keys; k++ {
		key := []byte(fmt.Sprintf("user-%d", k))
		if err := lb.Report(polylb.ServiceLevel, first[k], time.Millisecond, polylb.Failure); err != nil {
			t.Fatal(err)
		}
		retry, err := lb.SelectAmong(polylb.ServiceLevel, key, nil, []uint64{first[k]})
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.Report(polylb.ServiceLevel, retry, time.Millisecond, polylb.Success); err != nil {
			t.Fatal(err)
		}
		if want := without[first[k]][k]; retry != want {
			t.Fatalf("key %q: excluding %d retried on %d; a consumer without %d picks %d", key, first[k], retry, first[k], want)
		}
		bystander := first[k]%6 + 1
		kept, err := lb.SelectAmong(polylb.ServiceLevel, key, nil, []uint64{bystander})
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.Report(polylb.ServiceLevel, kept, time.Millisecond, polylb.Success); err != nil {
			t.Fatal(err)
		}
		if kept != first[k] {
			t.Fatalf("key %q: excluding %d moved it from %d to %d", key, bystander, first[k], kept)
		}
	}
	for _, row := range stats(t, lb).Invokers {
		if row.Active != 0 {
			t.Errorf("invoker %d has %d calls in flight", row.ID, row.Active)
		}
	}
}

// rendezvous reads configured weights only and takes the whole set: slow
// start, subsets and maglev's table size are refused, and so is an empty
// address, which leaves the previous set and its picks in place.
func TestRendezvousRefusesWhatItCannotHonour(t *testing.T) {
	assertBadConfigs(t, []badConfig{
		{"loadbalance=rendezvous&slowstart.windowMs=60000", "slowstart"},
		{"loadbalance=rendezvous&subset.size=3&subset.key=a", "subset"},
		{"loadbalance=rendezvous&maglev.tableSize=101", "maglev"},
	})
	lb := newBalancer(t, "loadbalance=rendezvous", weighted(100, 100))
	before := rendezvousPicks(t, lb, 100, nil)
	wantStatus(t, "an empty address",
		lb.Update([]polylb.Invoker{provider(1), polylb.NewInvoker(2, "")}), polylb.ErrInvalidArgument)
	if s := stats(t, lb); len(s.Invokers) != 2 {
		t.Errorf("a refused update left %d invokers, want the previous 2", len(s.Invokers))
	}
	if after := rendezvousPicks(t, lb, 100, nil); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a refused update moved keys")
	}
}
