//go:build cgo

package polylb

import (
	"errors"
	"time"
)

// Call is one call through a Balancer: selected when made (Balancer.Call,
// Balancer.CallAmong) and reported exactly once, by the first Finish or Done,
// with the time since the select. Every select then gets its one report, and
// no code path has to time the call itself.
//
// A Call is returned by value so that making one does not allocate. It is
// used by one goroutine (Finish is not synchronized) and must not be copied once
// made: Finish on each copy would report the call again. go vet's copylocks
// check flags such copies; pass a *Call instead. The zero Call (what a failed
// select returns) chose nothing: Finish and Done on it do nothing and return
// nil.
//
// End the call with End in a defer, given the function's named error
// result: the error is read when the function returns, and a panic counts as
// a failure:
//
//	call, err := lb.Call(method, key)
//	if err != nil {
//		return err
//	}
//	defer call.End(&err)
//
// (defer call.Done(err) would evaluate err at the defer statement, while it
// is still nil, and report every call as a success.)
type Call struct {
	_ noCopy

	balancer *Balancer // nil: the select failed, nothing to report
	method   Method
	id       uint64
	start    time.Duration // since clockBase
	ended    bool
}

// clockBase is what a Call's times are measured from. time.Since on a time
// with a monotonic reading reads one clock, where time.Now reads the wall
// clock too: Call and Finish read the clock once each (25-40 ns less per call
// than time.Now and time.Since on the project VM).
var clockBase = time.Now()

// noCopy makes go vet's copylocks check flag copies of the struct holding it.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// Call selects an invoker as Select does (same key, same errors) and returns
// the call to end with Finish or Done. On error the Call is the zero Call.
func (b *Balancer) Call(method Method, key []byte) (Call, error) {
	id, err := b.selectAt(method, key, 0)
	if err != nil {
		return Call{}, err
	}
	// Started after the select: the elapsed time is the RPC's own, which is
	// what the strategies compare across providers.
	return Call{balancer: b, method: method, id: id, start: time.Since(clockBase)}, nil
}

// CallAmong is Call over a subset, as SelectAmong (failover: exclude the ids
// already tried).
func (b *Balancer) CallAmong(method Method, key []byte, candidates, excluded []uint64) (Call, error) {
	id, err := b.selectAmongAt(method, key, candidates, excluded, 0)
	if err != nil {
		return Call{}, err
	}
	return Call{balancer: b, method: method, id: id, start: time.Since(clockBase)}, nil
}

// ID is the selected invoker's id (0 for the zero Call).
func (c *Call) ID() uint64 {
	return c.id
}

// Finish reports the call with the time since its select and the given outcome.
// Only the first Finish (or Done) reports; later ones return nil. It returns
// Report's error: ErrClosed once the balancer is closed.
func (c *Call) Finish(outcome Outcome) error {
	if c.balancer == nil || c.ended {
		return nil
	}
	c.ended = true
	err := c.balancer.reportAt(c.method, c.id, time.Since(clockBase)-c.start, outcome, 0)
	if errors.Is(err, ErrUnknownOutcome) {
		// Not an outcome: the call still ends (no verdict), or it stays in flight for good.
		_ = c.balancer.reportAt(c.method, c.id, 0, Cancelled, 0)
	}
	return err
}

// Done is Finish(OutcomeOf(err)): err is the call's error, nil for an answer.
// Tell your service's own errors apart first (see OutcomeOf): they are
// answers, so Finish(Success).
func (c *Call) Done(err error) error {
	return c.Finish(OutcomeOf(err))
}

// End is the deferred end of a call, given a pointer to the function's error
// result (see Call): it reads *errp when the function returns (Done(*errp);
// a nil errp is Done(nil)), and a panic that unwinds the function is a
// Failure, as an exception is in the other bindings, and goes on. With Done
// in a deferred closure instead, err is still nil while a panic unwinds and
// the call counts as a success. A runtime.Goexit (t.FailNow in a test) is no
// panic and leaves *errp as it was, usually nil: that call counts as a
// success; set *errp before such an exit if it must not.
func (c *Call) End(errp *error) {
	if r := recover(); r != nil {
		_ = c.Finish(Failure)
		panic(r)
	}
	var err error
	if errp != nil {
		err = *errp
	}
	_ = c.Done(err)
}
