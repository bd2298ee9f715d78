package polylb_test

import (
	"fmt"
	"strings"
	"testing"

	polylb "github.com/polylb/polylb/bindings/go"
)

// maglevPick selects key at the service level and fails the test on an error.
func maglevPick(t *testing.T, lb *polylb.Balancer, key []byte) uint64 {
	t.Helper()
	id, err := lb.Select(polylb.ServiceLevel, key)
	if err != nil {
		t.Fatalf("Select(%q): %v", key, err)
	}
	return id
}

// A key goes to the same invoker on every call and on every balancer with
// the same set in any order (the table is a function of addresses and
// weights only); distinct keys share the invokers in proportion to their
// weights (20 000 keys within 5σ of the binomial; the table's own shares are
// within 1 % of the weights' at 65537 slots for three invokers).
func TestMaglevIsStickyFollowsWeightsAndIgnoresOrder(t *testing.T) {
	set := weighted(100, 100, 200)
	lb := newBalancer(t, "loadbalance=maglev", set)
	m := method(t, lb, "sayHello")
	reversed := newBalancer(t, "loadbalance=maglev", []polylb.Invoker{set[2], set[1], set[0]})
	counts := map[uint64]int{}
	for k := 0; k < draws; k++ {
		key := []byte(fmt.Sprintf("user-%d", k))
		first, err := lb.Select(m, key)
		if err != nil {
			t.Fatal(err)
		}
		if again := maglevPick(t, lb, key); again != first {
			t.Fatalf("key %q went to %d, then %d", key, first, again)
		}
		if k%10 == 0 {
			if other := maglevPick(t, reversed, key); other != first {
				t.Fatalf("key %q: set 1,2,3 picks %d, set 3,2,1 picks %d", key, first, other)
			}
		}
		counts[first]++
	}
	assertBinomial(t, "id 1 (weight 100 of 400)", counts[1], draws, 0.25)
	assertBinomial(t, "id 2 (weight 100 of 400)", counts[2], draws, 0.25)
	assertBinomial(t, "id 3 (weight 200 of 400)", counts[3], draws, 0.5)

	// An invoker of weight 0 owns no slot while another has weight.
	zero := newBalancer(t, "loadbalance=maglev", weighted(100, 0, 100))
	for k := 0; k < 2000; k++ {
		if id := maglevPick(t, zero, []byte(fmt.Sprintf("user-%d", k))); id == 2 {
			t.Fatalf("key user-%d went to the invoker of weight 0", k)
		}
	}
}

// A pick among candidates (failover's exclusion of the tried invoker, a
// routed subset) keeps every key whose invoker is a candidate where it was;
// a key whose invoker is excluded goes to another invoker, the same one
// every time, and those keys spread over the others.
func TestMaglevFailoverMovesOnlyTheExcludedInvokersKeys(t *testing.T) {
	lb := newBalancer(t, "loadbalance=maglev", weighted(1, 1, 1, 1))
	m := method(t, lb, "sayHello")
	failovers := map[uint64]map[uint64]bool{}
	for k := 0; k < 2000; k++ {
		key := []byte(fmt.Sprintf("user-%d", k))
		owner, err := lb.Select(m, key)
		if err != nil {
			t.Fatal(err)
		}
		other, err := lb.SelectAmong(m, key, nil, []uint64{owner})
		if err != nil {
			t.Fatal(err)
		}
		if other == owner || other < 1 || other > 4 {
			t.Fatalf("key %q of %d: excluding %d picked %d", key, owner, owner, other)
		}
		if again, _ := lb.SelectAmong(m, key, nil, []uint64{owner}); again != other {
			t.Fatalf("key %q: excluding %d picked %d, then %d", key, owner, other, again)
		}
		if failovers[owner] == nil {
			failovers[owner] = map[uint64]bool{}
		}
		failovers[owner][other] = true
		// Keys of the invokers that stay candidates do not move.
		for _, excluded := range []uint64{1, 2, 3, 4} {
			if excluded == owner {
				continue
			}
			if got, err := lb.SelectAmong(m, key, nil, []uint64{excluded}); err != nil || got != owner {
				t.Fatalf("key %q of %d: excluding %d picked %d (%v)", key, owner, excluded, got, err)
			}
		}
		among := []uint64{owner, owner%4 + 1}
		if got, err := lb.SelectAmong(m, key, among, nil); err != nil || got != owner {
			t.Fatalf("key %q of %d: among %v picked %d (%v)", key, owner, among, got, err)
		}
	}
	if len(failovers) != 4 {
		t.Fatalf("2000 keys reached only %d of 4 invokers", len(failovers))
	}
	for owner, others := range failovers {
		if len(others) < 2 {
			t.Errorf("keys of %d all fail over to %v: want them spread", owner, others)
		}
	}
}

// Removing an invoker moves its own keys and only a few per cent of the
// others (maglev is not minimal as Dubbo's ring is, but close).
func TestMaglevRemovalMovesFewOtherKeys(t *testing.T) {
	all := weighted(1, 1, 1, 1, 1)
	lb := newBalancer(t, "loadbalance=maglev", all)
	const keys = 5000
	before := make([]uint64, keys)
	for k := range before {
		before[k] = maglevPick(t, lb, []byte(fmt.Sprintf("user-%d", k)))
	}
	if err := lb.Update(append(append([]polylb.Invoker{}, all[:2]...), all[3:]...)); err != nil {
		t.Fatal(err)
	}
	stayed, moved := 0, 0
	for k, was := range before {
		now := maglevPick(t, lb, []byte(fmt.Sprintf("user-%d", k)))
		switch {
		case now == 3:
			t.Fatalf("key user-%d still goes to the removed invoker", k)
		case was != 3 && now != was:
			moved++
		case was != 3:
			stayed++
		}
	}
	if moved*10 > stayed+moved {
		t.Errorf("%d of %d keys of the remaining invokers moved: want under 10 %%", moved, stayed+moved)
	}
}

// maglev.tableSize: a prime in 7..=16777213, at least the number of
// invokers. A bad value is a config error naming the key; a set larger than
// the table is LIMIT_EXCEEDED and leaves the previous set in place.
func TestMaglevTableSize(t *testing.T) {
	assertBadConfigs(t, []badConfig{
		{"loadbalance=maglev&maglev.tableSize=65536", "prime"},
		{"loadbalance=maglev&maglev.tableSize=1", "7..=16777213"},
		{"loadbalance=maglev&maglev.tableSize=5", "7..=16777213"},
		{"loadbalance=maglev&maglev.tableSize=16777259", "7..=16777213"}, // prime, above the range
		{"loadbalance=maglev&maglev.tableSize=x", "maglev.tableSize"},
		{"loadbalance=consistenthash&maglev.tableSize=65537", "maglev.tableSize"}, // another strategy
		{"loadbalance=maglev&slowstart.windowMs=60000", "slowstart.windowMs"},     // no slow start
	})

	// 7 slots: 7 invokers fit (one slot each, so keys reach all of them),
	// an 8th does not and the update changes nothing.
	lb := newBalancer(t, "loadbalance=maglev&maglev.tableSize=7", weighted(1, 1, 1, 1, 1, 1, 1))
	keyed := func() []uint64 {
		picks := make([]uint64, 700)
		for k := range picks {
			picks[k] = maglevPick(t, lb, []byte(fmt.Sprintf("user-%d", k)))
		}
		return picks
	}
	before := keyed()
	reached := map[uint64]bool{}
	for _, id := range before {
		reached[id] = true
	}
	if len(reached) != 7 {
		t.Errorf("700 keys over 7 slots of 7 invokers reached only %v", reached)
	}
	e := wantStatus(t, "8 invokers in 7 slots", lb.Update(weighted(1, 1, 1, 1, 1, 1, 1, 1)), polylb.ErrLimitExceeded)
	if e != nil && !strings.Contains(e.Message, "maglev.tableSize") {
		t.Errorf("message %q does not name maglev.tableSize", e.Message)
	}
	if s := stats(t, lb); len(s.Invokers) != 7 {
		t.Errorf("a rejected update left %d invokers, want the previous 7", len(s.Invokers))
	}
	if after := keyed(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a rejected update moved keys")
	}

	// Invokers are placed by address: an empty one is refused, as for the
	// ring strategies.
	wantStatus(t, "no address", lb.Update([]polylb.Invoker{polylb.NewInvoker(1, "")}), polylb.ErrInvalidArgument)

	// The table size is part of the mapping: another size maps keys anew.
	small := newBalancer(t, "loadbalance=maglev&maglev.tableSize=257", weighted(1, 1, 1))
	large := newBalancer(t, "loadbalance=maglev", weighted(1, 1, 1))
	differ := 0
	for k := 0; k < 300; k++ {
		key := []byte(fmt.Sprintf("user-%d", k))
		if maglevPick(t, small, key) != maglevPick(t, large, key) {
			differ++
		}
	}
	if differ == 0 {
		t.Errorf("tables of 257 and 65537 slots map all 300 keys alike")
	}
}
