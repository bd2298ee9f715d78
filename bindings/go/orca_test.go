package polylb_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// orcaNow is the instant of every call of the cross-language sequence:
// 1_700_000_000_000_000 µs.
var orcaNow = time.UnixMicro(1_700_000_000_000_000)

// orcaCrossLanguagePicks and orcaCrossLanguageCounts: invokers 1..4 at
// 10.0.0.<id>:20880 (default weight) under loadbalance=orca&orca.blackoutMs=0,
// after load reports (1: qps 100, eps 0, utilization 0.5), (2: 100, 0, 0.25),
// (3: 100, 50, 0.5) and none for 4, every call at orcaNow: the first 12
// selects, and the picks per id over those 12 and 1188 more. Capacities 200,
// 400 and 100 (half of 3's calls fail), 4 the mean, 233.3. Computed once from
// the Rust library (tests/beyond_dubbo/orca.rs, the_cross_language_sequence),
// the contract every binding asserts: the stride schedule draws no random
// number, so the sequence is the same in every language.
var (
	orcaCrossLanguagePicks  = []uint64{2, 4, 1, 2, 4, 2, 1, 2, 3, 4, 2, 1}
	orcaCrossLanguageCounts = map[uint64]int{1: 257, 2: 515, 3: 128, 4: 300}
)

// reportLoads reports each id's (qps, eps, utilization) at now.
func reportLoads(t *testing.T, lb *polylb.Balancer, now time.Time, loads map[uint64][3]float64) {
	t.Helper()
	for id, l := range loads {
		if err := lb.ReportLoadAt(id, l[0], l[1], l[2], now); err != nil {
			t.Fatalf("ReportLoadAt(%d, %v): %v", id, l, err)
		}
	}
}

// orcaPicksAt selects n times at the service level at now, reporting each call
// as a success of 1 ms at now, and returns the picks in order.
func orcaPicksAt(t *testing.T, lb *polylb.Balancer, n int, now time.Time) []uint64 {
	t.Helper()
	picks := make([]uint64, n)
	for i := range picks {
		id, err := lb.SelectAt(polylb.ServiceLevel, nil, now)
		if err != nil {
			t.Fatalf("SelectAt #%d: %v", i, err)
		}
		if err := lb.ReportAt(polylb.ServiceLevel, id, time.Millisecond, polylb.Success, now); err != nil {
			t.Fatalf("ReportAt #%d: %v", i, err)
		}
		picks[i] = id
	}
	return picks
}

func tally(picks []uint64) map[uint64]int {
	c := map[uint64]int{}
	for _, id := range picks {
		c[id]++
	}
	return c
}

var crossLanguageLoads = map[uint64][3]float64{1: {100, 0, 0.5}, 2: {100, 0, 0.25}, 3: {100, 50, 0.5}}

func TestOrcaCrossLanguageSequence(t *testing.T) {
	lb := newBalancer(t, "loadbalance=orca&orca.blackoutMs=0", weighted(100, 100, 100, 100))
	reportLoads(t, lb, orcaNow, crossLanguageLoads)
	// The first 12 as the Rust test makes them: selects only, left in flight
	// (orca's schedule does not read calls in flight).
	first := make([]uint64, 12)
	for i := range first {
		id, err := lb.SelectAt(polylb.ServiceLevel, nil, orcaNow)
		if err != nil {
			t.Fatal(err)
		}
		first[i] = id
	}
	if !slices.Equal(first, orcaCrossLanguagePicks) {
		t.Fatalf("first 12 picks %v, want %v (the sequence every language must agree on)", first, orcaCrossLanguagePicks)
	}
	counts := tally(append(first, orcaPicksAt(t, lb, 1188, orcaNow)...))
	if fmt.Sprint(counts) != fmt.Sprint(orcaCrossLanguageCounts) {
		t.Errorf("1200 picks %v, want %v", counts, orcaCrossLanguageCounts)
	}
	s, err := lb.StatsAt(orcaNow)
	if err != nil {
		t.Fatal(err)
	}
	if s.Strategy != "orca" {
		t.Errorf("strategy %q", s.Strategy)
	}
	// The stats show what dealt the calls: each reported weight, counted
	// (no blackout), and shares in proportion 200 : 400 : 100 : 233.3.
	weights := map[uint64]float64{1: 200, 2: 400, 3: 100, 4: 700.0 / 3}
	for _, inv := range s.Invokers {
		o, ok := inv.Orca()
		if !ok {
			t.Fatalf("invoker %d: no orca fields in %v", inv.ID, rawFields(inv.Extra))
		}
		if inv.ID == 4 {
			if o.Weight != nil || o.Counted {
				t.Errorf("invoker 4 reported nothing, got %+v", o)
			}
		} else if o.Weight == nil || math.Abs(*o.Weight-weights[inv.ID]) > 1e-9 || !o.Counted {
			t.Errorf("invoker %d: %+v, want weight %v, counted", inv.ID, o, weights[inv.ID])
		}
		if !o.Reported {
			t.Errorf("invoker %d: orca_reported false with three weights counted", inv.ID)
		}
		if want := weights[inv.ID] / (700 + 700.0/3); math.Abs(o.Share-want) > 1e-3 {
			t.Errorf("invoker %d: share %v, want %.4f", inv.ID, o.Share, want)
		}
	}
}

// A weight counts only once orca.blackoutMs has passed since the provider's
// first report: until then the configured weights deal the calls (here
// equal: 1/4 each), after it the reported capacities do.
func TestOrcaSharesFollowReportsAfterTheBlackout(t *testing.T) {
	lb := newBalancer(t, "loadbalance=orca&orca.blackoutMs=5000&orca.updateMs=100", weighted(100, 100, 100, 100))
	capacities := map[uint64][3]float64{1: {100, 0, 1}, 2: {200, 0, 1}, 3: {300, 0, 1}, 4: {400, 0, 1}}
	reportLoads(t, lb, orcaNow, capacities)

	during := orcaNow.Add(4 * time.Second)
	reportLoads(t, lb, during, capacities)
	for id, n := range tally(orcaPicksAt(t, lb, 400, during)) {
		if n != 100 {
			t.Errorf("in the blackout, invoker %d took %d of 400 calls, want 100 (configured weights)", id, n)
		}
	}
	if inv, _ := stats(t, lb).Invoker(1); inv.Extra["orca_counted"] == nil {
		t.Fatalf("no orca_counted in %v", rawFields(inv.Extra))
	}

	after := orcaNow.Add(6 * time.Second)
	reportLoads(t, lb, after, capacities)
	counts := tally(orcaPicksAt(t, lb, 1000, after))
	for id, load := range capacities {
		// The stride schedule deals each its share within a call or two.
		if want := 1000 * load[0] / 1000; math.Abs(float64(counts[id])-want) > 2 {
			t.Errorf("after the blackout, invoker %d took %d of 1000 calls, want %v ± 2", id, counts[id], want)
		}
	}
	s, err := lb.StatsAt(after)
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range s.Invokers {
		if o, ok := inv.Orca(); !ok || !o.Counted || !o.Reported || o.Weight == nil || *o.Weight != capacities[inv.ID][0] {
			t.Errorf("invoker %d: orca %+v (ok %v), want weight %v, counted, reported", inv.ID, o, ok, capacities[inv.ID][0])
		}
	}
}

// A load report belongs to the provider, not to a method: the weights it
// gives deal every method's calls.
func TestOrcaReportsCountForEveryMethod(t *testing.T) {
	lb := newBalancer(t, "loadbalance=orca&orca.blackoutMs=0", weighted(100, 100))
	reportLoads(t, lb, orcaNow, map[uint64][3]float64{1: {300, 0, 1}, 2: {100, 0, 1}})
	for _, name := range []string{"sayHello", "sayBye"} {
		m := method(t, lb, name)
		c := map[uint64]int{}
		for i := 0; i < 400; i++ {
			id, err := lb.SelectAt(m, nil, orcaNow)
			if err != nil {
				t.Fatal(err)
			}
			c[id]++
		}
		if math.Abs(float64(c[1])-300) > 2 {
			t.Errorf("%s: invoker 1 took %d of 400, want 300 ± 2 (%v)", name, c[1], c)
		}
	}
}

// A bad report is ErrInvalidArgument naming the number, and changes nothing.
func TestReportLoadErrors(t *testing.T) {
	lb := newBalancer(t, "loadbalance=orca&orca.blackoutMs=0", weighted(100, 100, 100))
	reportLoads(t, lb, orcaNow, map[uint64][3]float64{1: {100, 10, 0.5}, 2: {50, 0, 0.5}})
	before, err := lb.StatsJSON(orcaNow)
	if err != nil {
		t.Fatal(err)
	}
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		qps, eps, utilization float64
		names                 string
	}{
		{nan, 0, 0.5, "qps = NaN"},
		{inf, 0, 0.5, "qps = +Inf"},
		{-1, 0, 0.5, "qps = -1"},
		{math.Inf(-1), 0, 0.5, "qps = -Inf"},
		{100, nan, 0.5, "eps = NaN"},
		{100, inf, 0.5, "eps = +Inf"},
		{100, -0.5, 0.5, "eps = -0.5"},
		{100, 0, nan, "utilization = NaN"},
		{100, 0, inf, "utilization = +Inf"},
		{100, 0, -0.25, "utilization = -0.25"},
		{10, 11, 0.5, "invalid argument: eps = 11 is above qps = 10 (want eps <= qps)"},
		{0, 1, 0.5, "eps = 1 is above qps = 0"},
	} {
		what := fmt.Sprintf("ReportLoad(1, %v, %v, %v)", c.qps, c.eps, c.utilization)
		err := lb.ReportLoadAt(1, c.qps, c.eps, c.utilization, orcaNow)
		if e := wantStatus(t, what, err, polylb.ErrInvalidArgument); e != nil && !strings.Contains(e.Message, c.names) {
			t.Errorf("%s: message %q does not name %q", what, e.Message, c.names)
		}
		// The same through the library's clock.
		wantStatus(t, what+" at the library's clock", lb.ReportLoad(1, c.qps, c.eps, c.utilization), polylb.ErrInvalidArgument)
	}
	after, err := lb.StatsJSON(orcaNow)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("bad reports changed the stats:\nbefore %s\nafter  %s", before, after)
	}
	// The edges are valid: eps equal to qps, zeros (ignored as saying
	// nothing of capacity, but accepted).
	for _, l := range [][3]float64{{10, 10, 0.5}, {0, 0, 0}, {100, 0, 0}} {
		if err := lb.ReportLoadAt(3, l[0], l[1], l[2], orcaNow); err != nil {
			t.Errorf("ReportLoad(3, %v): %v", l, err)
		}
	}
}

// Reports for ids not in the set, and reports to other strategies, are
// accepted and ignored.
func TestReportLoadIgnoredWhereItMeansNothing(t *testing.T) {
	lb := newBalancer(t, "loadbalance=orca&orca.blackoutMs=0", weighted(100, 100))
	if err := lb.ReportLoadAt(12345, 100, 0, 0.5, orcaNow); err != nil {
		t.Errorf("report for an unknown id: %v", err)
	}
	for _, inv := range stats(t, lb).Invokers {
		if o, ok := inv.Orca(); !ok || o.Weight != nil {
			t.Errorf("invoker %d: %+v (ok %v) after a report for another id", inv.ID, o, ok)
		}
	}

	for _, strategy := range []string{"roundrobin", "adaptive", "p2c"} {
		other := newBalancer(t, "loadbalance="+strategy+"&seed=1", weighted(100, 100))
		for _, id := range []uint64{1, 2, 12345} {
			if err := other.ReportLoad(id, 100, 0, 0.5); err != nil {
				t.Errorf("%s: ReportLoad(%d): %v", strategy, id, err)
			}
		}
		for _, inv := range stats(t, other).Invokers {
			if _, ok := inv.Orca(); ok {
				t.Errorf("%s: invoker %d has orca fields: %v", strategy, inv.ID, rawFields(inv.Extra))
			}
		}
		// The numbers are checked whatever the strategy.
		wantStatus(t, strategy+": NaN qps", other.ReportLoad(1, math.NaN(), 0, 0.5), polylb.ErrInvalidArgument)
	}
	// Round robin's picks are what they are without the reports.
	rr := newBalancer(t, "loadbalance=roundrobin", weighted(100, 300))
	if err := rr.ReportLoad(1, 1000, 0, 0.01); err != nil {
		t.Fatal(err)
	}
	if c := tally(orcaPicksAt(t, rr, 400, orcaNow)); c[1] != 100 || c[2] != 300 {
		t.Errorf("roundrobin after a load report: %v, want 100 and 300", c)
	}
}

func TestOrcaRefusesWhatItCannotHonour(t *testing.T) {
	assertBadConfigs(t, []badConfig{
		{"loadbalance=orca&slowstart.windowMs=60000", "slowstart"},
		{"loadbalance=orca&subset.size=3&subset.key=a", "subset"},
		{"loadbalance=orca&orca.blackoutMs=-1", "orca.blackoutMs"},
		{"loadbalance=orca&orca.expirationMs=0", "orca.expirationMs"},
		{"loadbalance=orca&orca.updateMs=0", "orca.updateMs"},
		{"loadbalance=orca&orca.errorPenalty=101", "orca.errorPenalty"},
		{"loadbalance=orca&orca.errorPenalty=-0.5", "orca.errorPenalty"},
		{"loadbalance=orca&orca.blackout=5", "orca.blackout"},
		{"loadbalance=roundrobin&orca.blackoutMs=0", "orca.blackoutMs"},
	})
	// Subsets by index are taken: picks stay in the subset.
	lb := newBalancer(t, "loadbalance=orca&orca.blackoutMs=0&subset.size=4&subset.index=5", fleet(12))
	members := inSubset(t, lb)
	if len(members) != 4 {
		t.Fatalf("in_subset %v, want 4 ids", members)
	}
	for id := range tally(orcaPicksAt(t, lb, 400, orcaNow)) {
		if !contains(members, id) {
			t.Fatalf("picked %d outside the subset %v", id, members)
		}
	}
}

// A failover retry draws among the invokers left, in proportion to the
// reported weights.
func TestOrcaAmongTheInvokersLeftFollowsTheWeights(t *testing.T) {
	lb := newBalancer(t, "loadbalance=orca&orca.blackoutMs=0&seed=42", weighted(100, 100, 100))
	reportLoads(t, lb, orcaNow, map[uint64][3]float64{1: {100, 0, 1}, 2: {300, 0, 1}, 3: {600, 0, 1}})
	counts := map[uint64]int{}
	for i := 0; i < draws; i++ {
		id, err := lb.SelectAmongAt(polylb.ServiceLevel, nil, nil, []uint64{3}, orcaNow)
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.ReportAt(polylb.ServiceLevel, id, time.Millisecond, polylb.Success, orcaNow); err != nil {
			t.Fatal(err)
		}
		counts[id]++
	}
	if counts[3] != 0 {
		t.Fatalf("picked the excluded invoker %d times", counts[3])
	}
	assertBinomial(t, "id 1 (weight 100 of 400)", counts[1], draws, 0.25)
}

func TestReportLoadAfterCloseIsErrClosed(t *testing.T) {
	lb, err := polylb.New("loadbalance=orca")
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.Update(weighted(100)); err != nil {
		t.Fatal(err)
	}
	lb.Close()
	for name, err := range map[string]error{
		"ReportLoad":          lb.ReportLoad(1, 100, 0, 0.5),
		"ReportLoadAt":        lb.ReportLoadAt(1, 100, 0, 0.5, orcaNow),
		"ReportLoad, bad qps": lb.ReportLoad(1, math.NaN(), 0, 0.5),
		"ReportReconnect":     lb.ReportReconnect(1),
		"ReportReconnectAt":   lb.ReportReconnectAt(1, orcaNow),
	} {
		if !errors.Is(err, polylb.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// ReportReconnect restarts an invoker's run of load reports, as gRFC A58 does
// when a subchannel becomes READY again: its weight stops counting at once,
// and counts again a blackout after its next report.
func TestOrcaReportReconnectRestartsTheBlackout(t *testing.T) {
	lb := newBalancer(t, "loadbalance=orca&orca.blackoutMs=5000&orca.updateMs=60000", weighted(100, 100))
	capacities := map[uint64][3]float64{1: {100, 0, 1}, 2: {300, 0, 1}}
	reportLoads(t, lb, orcaNow, capacities)
	counted := orcaNow.Add(6 * time.Second)
	reportLoads(t, lb, counted, capacities)
	wantDealt := func(what string, now time.Time, one, two int) {
		t.Helper()
		c := tally(orcaPicksAt(t, lb, 400, now))
		if math.Abs(float64(c[1]-one)) > 2 || math.Abs(float64(c[2]-two)) > 2 {
			t.Errorf("%s: %v of 400 calls, want %d and %d ± 2", what, c, one, two)
		}
	}
	wantDealt("counted", counted, 100, 300)

	if err := lb.ReportReconnectAt(2, counted); err != nil {
		t.Fatal(err)
	}
	if err := lb.ReportReconnect(12345); err != nil {
		t.Errorf("ReportReconnect of an id not in the set: %v", err)
	}
	wantDealt("at the reconnect", counted, 200, 200)
	s, err := lb.StatsAt(counted)
	if err != nil {
		t.Fatal(err)
	}
	if inv, _ := s.Invoker(2); true {
		if o, ok := inv.Orca(); !ok || o.Counted || o.Weight == nil || *o.Weight != 300 {
			t.Errorf("after the reconnect: %+v (ok %v), want the last weight 300, not counted", o, ok)
		}
	}

	back := counted.Add(time.Second)
	reportLoads(t, lb, back, capacities)
	wantDealt("in the new blackout", back.Add(4900*time.Millisecond), 200, 200)
	wantDealt("after the new blackout", back.Add(5*time.Second), 100, 300)

	// Other strategies accept it and ignore it.
	rr := newBalancer(t, "loadbalance=roundrobin", weighted(100, 300))
	for _, id := range []uint64{1, 2, 12345} {
		if err := rr.ReportReconnect(id); err != nil {
			t.Errorf("roundrobin: ReportReconnect(%d): %v", id, err)
		}
	}
	if c := tally(orcaPicksAt(t, rr, 400, orcaNow)); c[1] != 100 || c[2] != 300 {
		t.Errorf("roundrobin after a reconnect: %v, want 100 and 300", c)
	}
}
