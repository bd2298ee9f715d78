package polylbdubbo

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSweepPeriod is how often, at most, the states of services gone from
// the process are freed (see SetSweepPeriod).
const DefaultSweepPeriod = time.Minute

var (
	sweepPeriod atomic.Int64 // nanoseconds; <= 0: never
	sweepMu     sync.Mutex
	lastSweep   time.Time
)

func init() { sweepPeriod.Store(int64(DefaultSweepPeriod)) }

// SetSweepPeriod sets how often, at most, unused service states are freed;
// 0 or less never frees them. dubbo-go gives a LoadBalance no hook when a
// reference is destroyed, so the adapter frees a service's state (its polylb
// balancers) when, at a sweep, the service had no select during the whole
// period before and none of its providers is available any more (a destroyed
// reference destroys its invokers). Sweeps run when a new service's state is
// made, so states are bounded by the services in use plus those that ended
// within the last two periods. A freed service that comes back starts anew.
func SetSweepPeriod(d time.Duration) { sweepPeriod.Store(int64(d)) }

func maybeSweep() {
	period := time.Duration(sweepPeriod.Load())
	if period <= 0 {
		return
	}
	sweepMu.Lock()
	defer sweepMu.Unlock()
	now := time.Now()
	if now.Sub(lastSweep) < period {
		return
	}
	lastSweep = now
	for _, lb := range all {
		lb.services.Range(func(k, v any) bool {
			st := v.(*serviceState)
			if !st.used.Swap(false) && !st.anyAvailable() {
				st.retire()
				lb.services.Delete(k)
			}
			return true
		})
	}
}

func (st *serviceState) anyAvailable() bool {
	s := st.set.Load()
	if s == nil {
		return false
	}
	for _, inv := range s.members {
		if inv.IsAvailable() {
			return true
		}
	}
	return false
}
