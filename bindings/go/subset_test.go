package polylb_test

// Subsetting (subset.size / subset.key / subset.index) through the Go binding:
// picks stay in the subset the stats mark in_subset, the subset depends on the
// key and the addresses only, a failover leaves it only once its members are
// all excluded, bad configs are ErrInvalidConfig naming the key, and the subset
// of one fixed scenario is the one every language must agree on. Subsets dealt
// by subset.index hold every invoker equally often over consumers 0..C-1, so
// random and roundrobin take them (not subset.key); their fixed scenario is
// shared with the other languages too. The choice itself is tested in Rust
// (tests/beyond_dubbo/subset.rs).

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// crossLanguageSubset is the subset every language must agree on: invokers
// 1..20 at 10.0.0.<id>:20880 with
// loadbalance=leastactive&subset.size=4&subset.key=consumer-42 (same key +
// addresses -> same subset in Rust, C, Java, Go and Python). Computed once
// from the Rust library; the Java and Python tests assert the same literal.
var crossLanguageSubset = []uint64{6, 11, 15, 18}

// inSubset returns the ids the stats mark in_subset, sorted; every row must
// carry the mark.
func inSubset(t testing.TB, lb *polylb.Balancer) []uint64 {
	t.Helper()
	var ids []uint64
	for _, inv := range stats(t, lb).Invokers {
		raw, ok := inv.Extra["in_subset"]
		if !ok {
			t.Fatalf("invoker %d: no in_subset in its stats row", inv.ID)
		}
		switch string(raw) {
		case "true":
			ids = append(ids, inv.ID)
		case "false":
		default:
			t.Fatalf("invoker %d: in_subset is %s", inv.ID, raw)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func fleet(n uint64) []polylb.Invoker {
	var set []polylb.Invoker
	for i := uint64(1); i <= n; i++ {
		set = append(set, provider(i))
	}
	return set
}

func contains(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestSubsetPicksStayInTheSubsetAndUseAllOfIt(t *testing.T) {
	const draws = 3000
	for _, strategy := range []string{"p2c", "leastactive"} {
		t.Run(strategy, func(t *testing.T) {
			lb := newBalancer(t, "loadbalance="+strategy+"&subset.size=3&subset.key=h1&seed=11", fleet(12))
			members := inSubset(t, lb)
			if len(members) != 3 {
				t.Fatalf("in_subset %v, want 3 ids", members)
			}
			counts := countPicks(t, lb, polylb.ServiceLevel, draws)
			for id := range counts {
				if !contains(members, id) {
					t.Fatalf("picked %d outside the subset %v (%v)", id, members, counts)
				}
			}
			if len(counts) != 3 {
				t.Fatalf("picks %v do not use the whole subset %v", counts, members)
			}
			if strategy == "p2c" {
				for _, id := range members {
					assertBinomial(t, fmt.Sprint("member ", id), counts[id], draws, 1.0/3)
				}
			}
		})
	}
}

// subsetAddresses is the addresses a fresh balancer with key marks in_subset.
func subsetAddresses(t *testing.T, key string, set []polylb.Invoker) []string {
	t.Helper()
	lb := newBalancer(t, "loadbalance=leastactive&subset.size=3&subset.key="+key, set)
	address := map[uint64]string{}
	for _, inv := range set {
		address[inv.ID] = inv.Address
	}
	var out []string
	for _, id := range inSubset(t, lb) {
		out = append(out, address[id])
	}
	sort.Strings(out)
	return out
}

func TestSubsetIsTheKeyAndTheAddressesNotTheIDsOrOrder(t *testing.T) {
	chosen := subsetAddresses(t, "h1", fleet(12))
	if len(chosen) != 3 {
		t.Fatalf("subset %v, want 3 addresses", chosen)
	}
	if again := subsetAddresses(t, "h1", fleet(12)); !reflect.DeepEqual(again, chosen) {
		t.Errorf("same key and set: %v, then %v", chosen, again)
	}
	var renamed []polylb.Invoker
	for i := uint64(12); i >= 1; i-- {
		renamed = append(renamed, polylb.NewInvoker(5000+i, fmt.Sprintf("10.0.0.%d:20880", i)))
	}
	if got := subsetAddresses(t, "h1", renamed); !reflect.DeepEqual(got, chosen) {
		t.Errorf("same addresses under other ids, reversed: %v, want %v", got, chosen)
	}
	// h2: a fixed key known to give another subset of these 12 addresses.
	if other := subsetAddresses(t, "h2", fleet(12)); len(other) != 3 || reflect.DeepEqual(other, chosen) {
		t.Errorf("key h2 gives %v, key h1 %v: want another 3", other, chosen)
	}
}

func TestSubsetFailoverStaysInTheSubsetUntilItsMembersAreExcluded(t *testing.T) {
	lb := newBalancer(t, "loadbalance=leastactive&subset.size=3&subset.key=h1&seed=5", fleet(12))
	members := inSubset(t, lb)
	var everyone []uint64
	for i := uint64(1); i <= 12; i++ {
		everyone = append(everyone, i)
	}
	for trial := 0; trial < 200; trial++ {
		order := append(append([]uint64{}, members[trial%3:]...), members[:trial%3]...)
		var tried []uint64
		for _, member := range order {
			tried = append(tried, member)
			for _, candidates := range [][]uint64{nil, everyone} {
				id, err := lb.SelectAmong(polylb.ServiceLevel, nil, candidates, tried)
				if err != nil {
					t.Fatalf("SelectAmong excluding %v: %v", tried, err)
				}
				if err := lb.Report(polylb.ServiceLevel, id, time.Millisecond, polylb.Success); err != nil {
					t.Fatal(err)
				}
				switch {
				case contains(tried, id):
					t.Fatalf("picked %d, excluded %v", id, tried)
				case len(tried) < len(members) && !contains(members, id):
					t.Fatalf("left the subset %v with %v excluded: %d", members, tried, id)
				case len(tried) == len(members) && contains(members, id):
					t.Fatalf("every member of %v excluded, yet picked %d", members, id)
				}
			}
		}
	}
}

// configError is a config New must refuse with ErrInvalidConfig, and the
// key its message must name.
type configError struct{ config, key string }

// assertConfigErrorsNameTheKey asserts that New refuses each case's config
// with ErrInvalidConfig and a message naming the case's key.
func assertConfigErrorsNameTheKey(t *testing.T, cases []configError) {
	t.Helper()
	for _, c := range cases {
		lb, err := polylb.New(c.config)
		if err == nil {
			lb.Close()
			t.Errorf("New(%q) accepted", c.config)
			continue
		}
		var e *polylb.Error
		if !errors.Is(err, polylb.ErrInvalidConfig) || !errors.As(err, &e) || !strings.Contains(e.Message, c.key) {
			t.Errorf("New(%q): %v, want ErrInvalidConfig naming %s", c.config, err, c.key)
		}
	}
}

func TestSubsetConfigErrorsNameTheKey(t *testing.T) {
	assertConfigErrorsNameTheKey(t, []configError{
		{"loadbalance=maglev&subset.size=3&subset.key=a", "subset.size"},
		{"loadbalance=rendezvous&subset.size=3&subset.key=a", "subset.size"},
		{"loadbalance=consistenthash&subset.size=3&subset.key=a", "subset.size"},
		{"loadbalance=random&subset.size=3&subset.key=a", "subset.size"},
		{"loadbalance=roundrobin&subset.size=3&subset.key=a", "subset.size"},
		{"loadbalance=leastactive&subset.size=3", "subset.key"},
		{"loadbalance=leastactive&subset.key=a", "subset.key"},
		{"loadbalance=leastactive&subset.size=3&subset.key=a&subset.minHealthyPercent=50", "subset.minHealthyPercent"},
	})
}

func TestSubsetAcrossLanguages(t *testing.T) {
	var set []polylb.Invoker
	for i := uint64(1); i <= 20; i++ {
		set = append(set, polylb.NewInvoker(i, fmt.Sprintf("10.0.0.%d:20880", i)))
	}
	lb := newBalancer(t, "loadbalance=leastactive&subset.size=4&subset.key=consumer-42", set)
	if got := inSubset(t, lb); !reflect.DeepEqual(got, crossLanguageSubset) {
		t.Errorf("in_subset %v, want %v (the subset every language must agree on)", got, crossLanguageSubset)
	}
}

// crossLanguageIndexedSubsets are the subsets dealt by index every language
// must agree on: invokers 1..20 at 10.0.0.<id>:20880 (default weight) with
// loadbalance=random&subset.size=4&subset.index=<i>. Computed once from the
// Rust library; the Java (SubsetTest) and Python (test_subset.py) tests
// assert the same literal, and they must agree.
var crossLanguageIndexedSubsets = map[uint32][]uint64{
	0: {5, 7, 11, 14},
	1: {4, 10, 12, 17},
	7: {2, 4, 7, 11},
}

// indexedSubset is what a fresh balancer with strategy and
// subset.size=size&subset.index=index marks in_subset over ids 1..n at
// 10.0.0.<id>:20880.
func indexedSubset(t *testing.T, strategy string, size, index uint32, n uint64) []uint64 {
	t.Helper()
	var set []polylb.Invoker
	for i := uint64(1); i <= n; i++ {
		set = append(set, polylb.NewInvoker(i, fmt.Sprintf("10.0.0.%d:20880", i)))
	}
	config := fmt.Sprintf("loadbalance=%s&subset.size=%d&subset.index=%d", strategy, size, index)
	lb, err := polylb.New(config)
	if err != nil {
		t.Fatalf("New(%q): %v", config, err)
	}
	defer lb.Close()
	if err := lb.Update(set); err != nil {
		t.Fatal(err)
	}
	return inSubset(t, lb)
}

func TestSubsetByIndexAcrossLanguages(t *testing.T) {
	for index, want := range crossLanguageIndexedSubsets {
		if got := indexedSubset(t, "random", 4, index, 20); !reflect.DeepEqual(got, want) {
			t.Errorf("subset.index=%d: in_subset %v, want %v (the subset every language must agree on)", index, got, want)
		}
	}
}

func TestSubsetsByIndexHoldEveryInvokerEquallyOften(t *testing.T) {
	// 25 consumers x 4 places = 100 places over 20 invokers: each in exactly 5 subsets.
	held := map[uint64]int{}
	for index := uint32(0); index < 25; index++ {
		members := indexedSubset(t, "random", 4, index, 20)
		if len(members) != 4 {
			t.Fatalf("consumer %d: in_subset %v, want 4 ids", index, members)
		}
		for _, id := range members {
			held[id]++
		}
	}
	for id := uint64(1); id <= 20; id++ {
		if held[id] != 5 {
			t.Errorf("invoker %d in %d subsets, want 5 (%v)", id, held[id], held)
		}
	}
}

func TestSubsetByIndexServesLoadBlindStrategies(t *testing.T) {
	want := indexedSubset(t, "leastactive", 4, 5, 12)
	for _, strategy := range []string{"random", "roundrobin"} {
		t.Run(strategy, func(t *testing.T) {
			lb := newBalancer(t, "loadbalance="+strategy+"&subset.size=4&subset.index=5&seed=1", fleet(12))
			members := inSubset(t, lb)
			if len(members) != 4 || !reflect.DeepEqual(members, want) {
				t.Fatalf("in_subset %v, want the 4 of index 5: %v", members, want)
			}
			counts := countPicks(t, lb, polylb.ServiceLevel, 2000)
			for id := range counts {
				if !contains(members, id) {
					t.Fatalf("picked %d outside the subset %v (%v)", id, members, counts)
				}
			}
			if len(counts) != len(members) {
				t.Fatalf("picks %v do not use the whole subset %v", counts, members)
			}
		})
	}
}

func TestSubsetByIndexConfigErrorsNameTheKey(t *testing.T) {
	assertConfigErrorsNameTheKey(t, []configError{
		{"loadbalance=random&subset.size=3&subset.key=a", "subset.size"},
		{"loadbalance=leastactive&subset.size=3&subset.key=a&subset.index=1", "subset.index"},
		{"loadbalance=random&subset.size=3&subset.key=a&subset.index=1", "subset.index"},
		{"loadbalance=maglev&subset.size=3&subset.index=1", "subset.size"},
		{"loadbalance=random&subset.index=1", "subset.index"},
		{"loadbalance=random&subset.size=3&subset.index=-1", "subset.index"},
		{"loadbalance=random&subset.size=3&subset.index=4294967296", "subset.index"},
	})
	if got := indexedSubset(t, "random", 4, 4294967295, 20); len(got) != 4 {
		t.Errorf("subset.index=4294967295: in_subset %v, want 4 ids", got)
	}
}
