package polylb_test

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Statistical tests use seed=42, so they are reproducible; the 5σ bounds
// are what make them meaningful for any seed.
const draws = 20000

func TestRandomFollowsWeights(t *testing.T) {
	weights := []int32{1, 2, 3, 4}
	lb := newBalancer(t, "loadbalance=random&seed=42", weighted(weights...))
	counts := countPicks(t, lb, method(t, lb, "sayHello"), draws)
	for i, w := range weights {
		assertBinomial(t, fmt.Sprintf("id %d (weight %d)", i+1, w), counts[uint64(i+1)], draws, float64(w)/10)
	}
}

func TestRandomEqualWeightsIsUniformAndZeroWeightIsNeverPicked(t *testing.T) {
	lb := newBalancer(t, "seed=42", weighted(100, 100, 100)) // random is the default
	counts := countPicks(t, lb, polylb.ServiceLevel, draws)
	for id := uint64(1); id <= 3; id++ {
		assertBinomial(t, fmt.Sprintf("id %d", id), counts[id], draws, 1.0/3)
	}

	lb = newBalancer(t, "loadbalance=random&seed=42", weighted(0, 5, 5))
	counts = countPicks(t, lb, polylb.ServiceLevel, draws)
	if counts[1] != 0 {
		t.Errorf("weight-0 invoker picked %d times", counts[1])
	}
	assertBinomial(t, "id 2", counts[2], draws, 0.5)
}

func TestRandomAmongCandidates(t *testing.T) {
	lb := newBalancer(t, "loadbalance=random&seed=42", weighted(1, 2, 3, 4))
	counts := map[uint64]int{}
	for i := 0; i < draws; i++ {
		// Candidates 1, 3, 4 minus excluded 99 (unknown, ignored) and 3, as a
		// failover would ask: 1 and 4 are left, weights 1:4. The last candidate
		// and the last exclusion both matter, so a binding that passes one id
		// too few of either list fails, as does one that returns the first
		// candidate left or ignores the weights.
		id, err := lb.SelectAmong(polylb.ServiceLevel, nil, []uint64{1, 3, 4}, []uint64{99, 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.Report(polylb.ServiceLevel, id, 0, polylb.Success); err != nil {
			t.Fatal(err)
		}
		counts[id]++
	}
	if counts[1]+counts[4] != draws {
		t.Errorf("picked outside the candidates left: %v", counts)
	}
	assertBinomial(t, "id 1", counts[1], draws, 1.0/5)
	assertBinomial(t, "id 4", counts[4], draws, 4.0/5)
}

func TestRoundRobinIsSmoothAndPerMethod(t *testing.T) {
	lb := newBalancer(t, "loadbalance=roundrobin", weighted(5, 1, 1))
	hello, bye := method(t, lb, "sayHello"), method(t, lb, "sayBye")
	want := []uint64{1, 1, 2, 1, 3, 1, 1} // Dubbo's [5,1,1] period
	var gotHello, gotBye []uint64
	for range want {
		// Interleaved: each method keeps its own position.
		for _, call := range []struct {
			m   polylb.Method
			got *[]uint64
		}{{hello, &gotHello}, {bye, &gotBye}} {
			id, err := lb.Select(call.m, nil)
			if err != nil {
				t.Fatal(err)
			}
			*call.got = append(*call.got, id)
		}
	}
	if !slices.Equal(gotHello, want) || !slices.Equal(gotBye, want) {
		t.Errorf("sayHello %v, sayBye %v, want %v each", gotHello, gotBye, want)
	}
}

func TestLeastActivePrefersFewestInFlight(t *testing.T) {
	lb := newBalancer(t, "loadbalance=leastactive&seed=42", weighted(100, 100, 100))
	m := method(t, lb, "sayHello")
	// Three selects without reports: each pick raises its active count, so
	// the three go to three different invokers.
	var picked []uint64
	for i := 0; i < 3; i++ {
		id, err := lb.Select(m, nil)
		if err != nil {
			t.Fatal(err)
		}
		picked = append(picked, id)
	}
	slices.Sort(picked)
	if !slices.Equal(picked, []uint64{1, 2, 3}) {
		t.Fatalf("picked %v, want each of 1, 2, 3 once", picked)
	}
	for _, inv := range stats(t, lb).Invokers {
		if inv.Active != 1 {
			t.Errorf("id %d: active %d, want 1", inv.ID, inv.Active)
		}
	}
	// Ending the call on 2 makes it the only least-active invoker.
	if err := lb.Report(m, 2, time.Millisecond, polylb.Success); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		id, err := lb.Select(m, nil)
		if err != nil {
			t.Fatal(err)
		}
		if id != 2 {
			t.Fatalf("select %d picked %d, want 2 (the only one with nothing in flight)", i, id)
		}
		if err := lb.Report(m, id, time.Millisecond, polylb.Failure); err != nil {
			t.Fatal(err)
		}
	}
	if inv, _ := stats(t, lb).Invoker(2); inv.Failures != 5 || inv.Succeeded != 1 {
		t.Errorf("id 2: %d failures, %d successes; want 5 and 1", inv.Failures, inv.Succeeded)
	}
}

func TestLeastActiveTiesFollowWeights(t *testing.T) {
	lb := newBalancer(t, "loadbalance=leastactive&seed=42", weighted(1, 3))
	counts := countPicks(t, lb, polylb.ServiceLevel, draws) // reported at once: all tie at 0
	assertBinomial(t, "id 1 (weight 1 of 4)", counts[1], draws, 0.25)
}

func TestShortestResponseAvoidsTheSlowInvoker(t *testing.T) {
	lb := newBalancer(t, "loadbalance=shortestresponse&seed=42", weighted(100, 100, 100))
	m := method(t, lb, "sayHello")
	// One success each: invoker 1 took 5 s, the others 1 ms. Virtual time
	// stays inside one 30 s window.
	for id, elapsed := range map[uint64]time.Duration{1: 5 * time.Second, 2: time.Millisecond, 3: time.Millisecond} {
		if err := lb.ReportAt(m, id, elapsed, polylb.Success, virtualNow); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 200; i++ {
		id, err := lb.SelectAt(m, nil, virtualNow)
		if err != nil {
			t.Fatal(err)
		}
		if id == 1 {
			t.Fatalf("select %d picked the 5 s invoker", i)
		}
	}
	if inv, _ := stats(t, lb).Invoker(1); inv.Selected != 0 {
		t.Errorf("slow invoker selected %d times", inv.Selected)
	}
}

func TestConsistentHashIsStickyPerKeyAndIgnoresWeights(t *testing.T) {
	lb := newBalancer(t, "loadbalance=consistenthash", weighted(1, 1000, 1))
	m := method(t, lb, "sayHello")
	// Weights ignored: the same addresses at equal weights place every key
	// exactly where 1:1000:1 does.
	equal := newBalancer(t, "loadbalance=consistenthash", weighted(1, 1, 1))
	// The ring without invoker n, for the walk past an excluded invoker.
	without := map[uint64]*polylb.Balancer{}
	for n := uint64(1); n <= 3; n++ {
		var rest []polylb.Invoker
		for _, inv := range weighted(1, 1000, 1) {
			if inv.ID != n {
				rest = append(rest, inv)
			}
		}
		without[n] = newBalancer(t, "loadbalance=consistenthash", rest)
	}
	pick := func(b *polylb.Balancer, key []byte) uint64 {
		t.Helper()
		id, err := b.Select(polylb.ServiceLevel, key)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	seen := map[uint64]bool{}
	for k := 0; k < 200; k++ {
		key := []byte(fmt.Sprintf("user-%d", k))
		first, err := lb.Select(m, key)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if again, _ := lb.Select(m, key); again != first {
				t.Fatalf("key %q went to %d, then %d", key, first, again)
			}
		}
		if same := pick(equal, key); same != first {
			t.Fatalf("key %q: weights 1:1000:1 pick %d, equal weights %d", key, first, same)
		}
		seen[first] = true
		// Excluding the key's invoker walks on along the ring to the next
		// point of another invoker: the owner on the ring without it.
		other, err := lb.SelectAmong(m, key, nil, []uint64{first})
		if err != nil {
			t.Fatal(err)
		}
		if want := pick(without[first], key); other != want {
			t.Fatalf("key %q: excluding %d picked %d, the ring without it gives %d", key, first, other, want)
		}
	}
	if len(seen) != 3 {
		t.Errorf("200 keys reached only %v", seen)
	}
}

func TestAdaptiveWeightedCoinThenLowLoad(t *testing.T) {
	lb := newBalancer(t, "loadbalance=adaptive&seed=42", weighted(1, 3))
	m := method(t, lb, "sayHello")
	// No provider has reported a load, so every load is 0 and each choice
	// is a weighted coin between the two invokers.
	counts := map[uint64]int{}
	for i := 0; i < draws; i++ {
		id, err := lb.SelectAt(m, nil, virtualNow)
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.ReportAt(m, id, time.Millisecond, polylb.Success, virtualNow); err != nil {
			t.Fatal(err)
		}
		counts[id]++
	}
	assertBinomial(t, "id 1 (weight 1 of 4)", counts[1], draws, 0.25)

	// Provider 2 reports a high CPU load: its load is now above 1's (still
	// 0), so every choice goes to 1 while the report is fresh.
	if err := lb.ReportProviderMetricsAt(m, 2, virtualNow, 4.0, 50*time.Millisecond, virtualNow); err != nil {
		t.Fatal(err)
	}
	later := virtualNow.Add(time.Millisecond)
	for i := 0; i < 100; i++ {
		id, err := lb.SelectAt(m, nil, later)
		if err != nil {
			t.Fatal(err)
		}
		if id != 1 {
			t.Fatalf("select %d picked the loaded provider", i)
		}
		if err := lb.ReportAt(m, id, time.Millisecond, polylb.Success, later); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEveryStrategyRunsAndNamesItself(t *testing.T) {
	for _, name := range []string{"random", "roundrobin", "leastactive", "shortestresponse", "consistenthash", "adaptive", "maglev", "rendezvous", "orca"} {
		t.Run(name, func(t *testing.T) {
			lb := newBalancer(t, "loadbalance="+name+"&seed=42", weighted(1, 2, 3, 4, 5))
			m := method(t, lb, "sayHello")
			for i := 0; i < 1000; i++ {
				id, err := lb.Select(m, []byte(fmt.Sprintf("key-%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				if id < 1 || id > 5 {
					t.Fatalf("picked id %d, not in the set", id)
				}
				outcome := []polylb.Outcome{polylb.Success, polylb.Failure, polylb.Timeout, polylb.Cancelled}[i%4]
				if err := lb.Report(m, id, time.Duration(i)*time.Microsecond, outcome); err != nil {
					t.Fatal(err)
				}
			}
			s := stats(t, lb)
			if s.Strategy != name {
				t.Errorf("stats strategy %q, want %q", s.Strategy, name)
			}
			var selected, perMethod uint64
			for _, inv := range s.Invokers {
				selected += inv.Selected
				if inv.Active != 0 {
					t.Errorf("id %d: active %d after every call was reported", inv.ID, inv.Active)
				}
				for _, ms := range inv.Methods {
					if ms.Method == "sayHello" {
						perMethod += ms.Selected
					}
				}
			}
			if selected != 1000 || perMethod != 1000 {
				t.Errorf("selected sums to %d (sayHello: %d), want 1000", selected, perMethod)
			}
		})
	}
}

// What a strategy's picks of a method compare reaches Go in that method's
// Extra: adaptive's load (the provider's CPU load × (√ewma + 1) × (in flight
// + 1) / (success ratio × weight + 1), with the 2×timeout penalty a pick
// applies first after a report: 0.5 × (√(0.5·4 + 0.5·2000) + 1) = 16.3 ms
// for a 4 ms report under timeout=1000) and shortestresponse's window.
func TestStatsMethodRowsCarryWhatPicksCompare(t *testing.T) {
	lb := newBalancer(t, "loadbalance=adaptive&timeout=1000", weighted(100, 100))
	m := method(t, lb, "sayHello")
	now := time.Now()
	// A pick gives both invokers a row (a pick evaluates both loads).
	id, err := lb.SelectAt(m, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.ReportAt(m, id, 0, polylb.Cancelled, now); err != nil {
		t.Fatal(err)
	}
	if err := lb.ReportProviderMetricsAt(m, 1, now, 0.5, 4*time.Millisecond, now); err != nil {
		t.Fatal(err)
	}
	extra := methodExtra(t, lb, 1, "sayHello")
	if string(extra["provider_metrics"]) != "true" || string(extra["cpu_load"]) != "0.5" {
		t.Fatalf("adaptive row of invoker 1: %v", rawFields(extra))
	}
	var load float64
	if err := json.Unmarshal(extra["load"], &load); err != nil {
		t.Fatal(err)
	}
	if want := 0.5 * (math.Sqrt(0.5*2+0.5*2000) + 1); math.Abs(load-want) > 1e-9 {
		t.Errorf("load %v, want %v", load, want)
	}
	if got := string(methodExtra(t, lb, 2, "sayHello")["provider_metrics"]); got != "false" {
		t.Errorf("invoker 2 has reported nothing, provider_metrics %s", got)
	}

	lb = newBalancer(t, "loadbalance=shortestresponse", weighted(100))
	id, err = lb.Select(polylb.ServiceLevel, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.Report(polylb.ServiceLevel, id, 7*time.Millisecond, polylb.Success); err != nil {
		t.Fatal(err)
	}
	extra = methodExtra(t, lb, 1, "")
	if string(extra["window_successes"]) != "1" || string(extra["window_average_ms"]) != "7" {
		t.Errorf("shortestresponse row: %v", rawFields(extra))
	}
}

func methodExtra(t *testing.T, lb *polylb.Balancer, id uint64, name string) map[string]json.RawMessage {
	t.Helper()
	inv, ok := stats(t, lb).Invoker(id)
	if !ok {
		t.Fatalf("no stats for id %d", id)
	}
	for _, row := range inv.Methods {
		if row.Method == name {
			return row.Extra
		}
	}
	t.Fatalf("no row for method %q in %+v", name, inv.Methods)
	return nil
}

func rawFields(fields map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(fields))
	for k, v := range fields {
		out[k] = string(v)
	}
	return out
}
