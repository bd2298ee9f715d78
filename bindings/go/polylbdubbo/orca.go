package polylbdubbo

import (
	"errors"
	"fmt"
	"math"

	"dubbo.apache.org/dubbo-go/v3/common"

	polylb "github.com/polylb/polylb/bindings/go"
)

// ReportLoad feeds polylb-orca (or "polylb" with polylb.strategy=orca) with a
// provider's load report: the queries per second it served (qps), the failed
// ones among them (eps, at most qps) and its utilization (CPU or the
// application's own, 1.0 = full), as ORCA carries them. Dubbo has no load
// report of its own, so the caller brings the numbers (a filter that reads
// them from the provider's answer, say, or a poll of the provider's metrics);
// without any, orca deals calls by the configured weights.
//
// serviceKey is dubbo-go's service key, as for Stats; provider is the
// provider's URL (the invoker's GetURL(): its protocol, address and path
// name it). The report reaches every balancer of the service (a load is the
// provider's, whatever method's call carried it). A report for a service
// this extension has not balanced, or for a provider not in its set, is
// ignored, as polylb ignores reports for ids not in a set; a NaN, infinite or
// negative number, or eps above qps, is polylb.ErrInvalidArgument wherever
// the report goes.
func (lb *LoadBalance) ReportLoad(serviceKey string, provider *common.URL, qps, eps, utilization float64) error {
	bad := func(x float64) bool { return !(x >= 0) || math.IsInf(x, 1) } // NaN too
	if bad(qps) || bad(eps) || bad(utilization) || eps > qps {
		return fmt.Errorf("polylb: load report of %s (qps %v, eps %v, utilization %v): %w",
			serviceKey, qps, eps, utilization, polylb.ErrInvalidArgument)
	}
	v, ok := lb.services.Load(serviceKey)
	if !ok || provider == nil {
		return nil
	}
	st := v.(*serviceState)
	s := st.set.Load()
	if s == nil {
		return nil
	}
	pos, ok := s.positionOfURL(provider)
	if !ok {
		return nil
	}
	id := s.ids[pos]
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, b := range st.balancers {
		// A balancer closed meanwhile (swept) has nothing to weigh.
		if err := b.ReportLoad(id, qps, eps, utilization); err != nil && !errors.Is(err, polylb.ErrClosed) {
			return err
		}
	}
	return nil
}
