//go:build cgo

package polylb

import "encoding/json"

// Stats is the library's stats document (plb_balancer_stats), parsed.
type Stats struct {
	// Strategy is the strategy name, e.g. "roundrobin".
	Strategy string `json:"strategy"`
	// Invokers are in the set's order (the order of the last Update).
	Invokers []InvokerStats `json:"invokers"`
	// Extra holds top-level fields this binding does not name, undecoded.
	Extra map[string]json.RawMessage `json:"-"`
}

// InvokerStats are the live counters of one invoker, summed over methods.
type InvokerStats struct {
	ID      uint64 `json:"id"`
	Address string `json:"address"`
	Zone    string `json:"zone"`
	// Weight is the configured weight; EffectiveWeight is the weight after
	// warm-up at the time the stats were taken.
	Weight          int64 `json:"weight"`
	EffectiveWeight int64 `json:"effective_weight"`
	// Active is the number of calls selected and not yet reported.
	Active    int64  `json:"active"`
	Selected  uint64 `json:"selected"`
	Succeeded uint64 `json:"succeeded"`
	// Failures counts failures and timeouts; Timeouts only the latter.
	Failures uint64 `json:"failures"`
	Timeouts uint64 `json:"timeouts"`
	// Methods is the per-method breakdown of the counters above.
	Methods []MethodStats `json:"methods"`
	// Extra holds the fields this binding does not name (strategy-specific
	// state, resolved warm-up, mean latency, …), undecoded.
	Extra map[string]json.RawMessage `json:"-"`
}

// MethodStats are the counters of one invoker for one method.
type MethodStats struct {
	Method    string `json:"method"` // the interned name; "" is the service level
	Active    int64  `json:"active"`
	Selected  uint64 `json:"selected"`
	Succeeded uint64 `json:"succeeded"`
	Failures  uint64 `json:"failures"`
	Timeouts  uint64 `json:"timeouts"`
	// Extra holds the fields this binding does not name (what the strategy's
	// picks of the method compare: shortestresponse's window, adaptive's load),
	// undecoded.
	Extra map[string]json.RawMessage `json:"-"`
}

// Invoker returns the stats of the invoker with the given id.
func (s Stats) Invoker(id uint64) (InvokerStats, bool) {
	for _, inv := range s.Invokers {
		if inv.ID == id {
			return inv, true
		}
	}
	return InvokerStats{}, false
}

// OrcaStats is the orca strategy's state of one invoker, as the stats
// document gives it (orca_weight, orca_counted, orca_reported, orca_share).
type OrcaStats struct {
	// Weight is the capacity weight of the invoker's last load report,
	// qps / (utilization + eps/qps × orca.errorPenalty); nil before a report
	// that says something of capacity (non-zero qps and utilization).
	Weight *float64 `json:"orca_weight"`
	// Counted: the weight counts now (past orca.blackoutMs, not lapsed).
	Counted bool `json:"orca_counted"`
	// Reported: at least two weights counted at the last recomputation, so
	// the reports deal the calls (else the configured weights do).
	Reported bool `json:"orca_reported"`
	// Share is the invoker's share (0..1) of the calls the current schedule
	// deals.
	Share float64 `json:"orca_share"`
}

// Orca returns the invoker's orca state, read from Extra; false when the
// document has none (another strategy) or it does not parse.
func (s InvokerStats) Orca() (OrcaStats, bool) {
	var o OrcaStats
	fields := []struct {
		name string
		into any
	}{
		{"orca_weight", &o.Weight},
		{"orca_counted", &o.Counted},
		{"orca_reported", &o.Reported},
		{"orca_share", &o.Share},
	}
	for _, f := range fields {
		raw, ok := s.Extra[f.name]
		if !ok || json.Unmarshal(raw, f.into) != nil {
			return OrcaStats{}, false
		}
	}
	return o, true
}

// The document may gain fields (the ABI allows strategy-specific ones), so
// every level keeps whatever it does not name in Extra instead of dropping it.
// The three levels are read in one pass over the document (stats_decode.go):
// a json.Unmarshal per level, plus one into a map for Extra, read the method
// rows of 10 000 invokers about ten times over (0.7 s for 3 methods each).

func (s *Stats) UnmarshalJSON(data []byte) error {
	*s = Stats{}
	return decodeWhole(data, func(d *statsDecoder) error { return d.stats(s) })
}

func (s *InvokerStats) UnmarshalJSON(data []byte) error {
	*s = InvokerStats{}
	return decodeWhole(data, func(d *statsDecoder) error { return d.invoker(s) })
}

func (s *MethodStats) UnmarshalJSON(data []byte) error {
	*s = MethodStats{}
	return decodeWhole(data, func(d *statsDecoder) error { return d.method(s) })
}
