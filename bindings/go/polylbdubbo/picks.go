package polylbdubbo

import (
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Invocation attributes (never sent to the provider).
const (
	picksAttr = "polylb.picks"
	// endsAttr marks an invocation whose end the cluster interceptor will
	// see: only then may a pick wait for the filter.
	endsAttr = "polylb.ends"
)

// maxPending bounds the picks one invocation keeps (a safety net for an
// invocation reused without ever ending: older unsent picks are released).
const maxPending = 16

// pick is one select, in flight in polylb until it is reported exactly once:
// by the filter when the call it was made for returns, or as Cancelled when
// the invocation ends without sending it.
type pick struct {
	st       *serviceState
	balancer *polylb.Balancer
	method   polylb.Method
	id       uint64
	url      *common.URL // the chosen invoker's URL (the filter's invoker shares it)
	key      string      // the provider's identity, when the URL is another object
	started  bool
	start    time.Duration // since clockBase
}

// clockBase is what picks are timed from: time.Since on a time with a
// monotonic reading reads one clock, where time.Now reads the wall clock too.
var clockBase = time.Now()

// find is the index of the pending pick for the provider at u that is sent
// (or not), the newest or the oldest, or -1. URLs are compared as pointers
// first (the filter's invoker shares the directory invoker's URL); only when
// none matches is the provider's identity built and compared. Holds mu.
func (ps *picks) find(u *common.URL, started, newest bool) int {
	match := func(eq func(*pick) bool) int {
		for k := range ps.pending {
			i := k
			if newest {
				i = len(ps.pending) - 1 - k
			}
			if p := ps.pending[i]; p.started == started && eq(p) {
				return i
			}
		}
		return -1
	}
	if i := match(func(p *pick) bool { return p.url == u }); i >= 0 {
		return i
	}
	key := identity(u)
	return match(func(p *pick) bool { return p.key == key })
}

func (p *pick) report(outcome polylb.Outcome) {
	elapsed := time.Duration(0)
	if outcome != polylb.Cancelled {
		elapsed = time.Since(clockBase) - p.start
	}
	// The only error possible here is ErrClosed: the state was swept while
	// the call ran, and there is nothing left to count.
	_ = p.balancer.Report(p.method, p.id, elapsed, outcome)
}

// picks are an invocation's picks not yet reported, oldest first. Forking
// sends several picks of one invocation from several goroutines, so the
// list has a lock.
type picks struct {
	mu      sync.Mutex
	pending []*pick
	// tried are the (state, id) pairs this invocation picked so far: a
	// failover retry's select excludes them, as dubbo-go's reselect would
	// after picking one of them again.
	tried []triedID
	// Room for the first picks (a call and one retry), and the first pick
	// itself: most invocations make one pick, and then the record and the
	// pick are one allocation rather than four. The first pick is handed
	// out once (newPick) and never reused.
	pendingBuf [2]*pick
	triedBuf   [2]triedID
	first      pick
	firstTaken atomic.Bool
}

// newPick is a pick to fill in before it is shared: the record's own the
// first time, a new one after.
func (ps *picks) newPick() *pick {
	if ps.firstTaken.CompareAndSwap(false, true) {
		return &ps.first
	}
	return &pick{}
}

func newPicks() *picks {
	ps := &picks{}
	ps.pending = ps.pendingBuf[:0]
	ps.tried = ps.triedBuf[:0]
	return ps
}

type triedID struct {
	st *serviceState
	id uint64
}

func picksOf(inv base.Invocation, create bool) *picks {
	if v, ok := inv.GetAttribute(picksAttr); ok {
		if p, ok := v.(*picks); ok {
			return p
		}
	}
	if !create {
		return nil
	}
	// The first select of an invocation runs before forking sends it, but
	// a fork sent without a select (forking to all, a filter counting a call
	// sent without a pick) creates the record from its own goroutine, beside
	// the other forks: a check-then-store without a lock would let one fork
	// replace the record another fork's pick is in, and that pick would never
	// be reported. The invocation has no store-if-absent, hence the lock.
	mu := &createMu[invocationStripe(inv)]
	mu.Lock()
	defer mu.Unlock()
	if v, ok := inv.GetAttribute(picksAttr); ok {
		if p, ok := v.(*picks); ok {
			return p
		}
	}
	p := newPicks()
	inv.SetAttribute(picksAttr, p)
	return p
}

// createMu serialise the creation of invocations' records, striped by
// invocation so that unrelated calls rarely share a lock.
var createMu [64]sync.Mutex

func invocationStripe(inv base.Invocation) int {
	v := reflect.ValueOf(inv)
	if v.Kind() != reflect.Pointer {
		return 0
	}
	p := v.Pointer()
	return int((p>>4 ^ p>>10) % uintptr(len(createMu)))
}

func endsAreSeen(inv base.Invocation) bool {
	v, _ := inv.GetAttribute(endsAttr)
	b, _ := v.(bool)
	return b
}

// excluded appends to dst the ids this invocation picked from st.
func (ps *picks) excluded(st *serviceState, dst []uint64) []uint64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, t := range ps.tried {
		if t.st == st {
			dst = append(dst, t.id)
		}
	}
	return dst
}

// pendingIn reports whether the invocation has a pick of st not reported
// yet (a fork not sent, or sent and running).
func (ps *picks) pendingIn(st *serviceState) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.pending {
		if p.st == st {
			return true
		}
	}
	return false
}

// add keeps p until it is sent or released; it returns a pick evicted by the
// bound, to be cancelled by the caller.
func (ps *picks) add(p *pick) (evicted *pick) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.tried) < maxPending {
		ps.tried = append(ps.tried, triedID{p.st, p.id})
	}
	if len(ps.pending) >= maxPending {
		for i, q := range ps.pending {
			if !q.started {
				evicted = q
				ps.pending = append(ps.pending[:i], ps.pending[i+1:]...)
				break
			}
		}
		if evicted == nil { // all sent and never finished: drop the oldest's record
			evicted, ps.pending = ps.pending[0], ps.pending[1:]
			evicted.started = false // cancel it: no report would come
		}
	}
	ps.pending = append(ps.pending, p)
	return evicted
}

// start marks the newest unsent pick for the provider at u as sent now.
func (ps *picks) start(u *common.URL) *pick {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	i := ps.find(u, false, true)
	if i < 0 {
		return nil
	}
	p := ps.pending[i]
	p.started = true
	p.start = time.Since(clockBase)
	return p
}

// addStarted records a call counted by the filter itself (sent without a pick).
func (ps *picks) addStarted(p *pick) {
	p.started = true
	p.start = time.Since(clockBase)
	if evicted := ps.add(p); evicted != nil {
		evicted.report(polylb.Cancelled)
	}
}

// finish removes p, a sent pick, and reports whether it was still pending
// (false: the bound evicted and cancelled it already).
func (ps *picks) finish(p *pick) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i, q := range ps.pending {
		if q == p {
			ps.pending = append(ps.pending[:i], ps.pending[i+1:]...)
			return true
		}
	}
	return false
}

// remove drops p if it is still pending and unsent (a pick undone by select).
func (ps *picks) remove(p *pick) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i, q := range ps.pending {
		if q == p && !q.started {
			ps.pending = append(ps.pending[:i], ps.pending[i+1:]...)
			return true
		}
	}
	return false
}

// releaseUnsent reports every pick never sent as Cancelled (the invocation
// ended: a reselect replaced them, an error came first, or a forked call had
// not started yet) and forgets what was tried.
func (ps *picks) releaseUnsent() {
	ps.mu.Lock()
	var unsent []*pick
	kept := ps.pending[:0]
	for _, p := range ps.pending {
		if p.started {
			kept = append(kept, p)
		} else {
			unsent = append(unsent, p)
		}
	}
	clear(ps.pending[len(kept):])
	ps.pending = kept
	ps.tried = ps.tried[:0]
	ps.mu.Unlock()
	for _, p := range unsent {
		p.report(polylb.Cancelled)
	}
}
