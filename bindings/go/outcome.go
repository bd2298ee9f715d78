//go:build cgo

package polylb

import (
	"context"
	"errors"
	"os"
	"strconv"
)

// OutcomeOf is the outcome to Report for a call that returned err, as far as
// the standard library's errors tell (the rule is in docs/outcomes.md):
//
//   - nil: Success;
//   - a deadline (context.DeadlineExceeded, os.ErrDeadlineExceeded, or any
//     error in the chain whose Timeout() is true: net.Error, *url.Error):
//     Timeout;
//   - context.Canceled: Cancelled (your code gave the call up: no verdict on
//     the provider, so only the in-flight count is undone);
//   - anything else: Failure.
//
// An error the provider answered with (your service's own error, a gRPC
// NOT_FOUND, an HTTP 404) is a Success: tell those apart before calling
// OutcomeOf. gRPC status errors carry a code for that: map status.Code(err)
// as docs/outcomes.md's table does.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return Success
	}
	// os.ErrDeadlineExceeded by identity too: under a wrapper whose own Timeout()
	// looks no deeper (a *url.Error around fmt's %w), the walk below would stop
	// at that wrapper's false.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return Timeout
	}
	if errors.Is(err, context.Canceled) {
		return Cancelled
	}
	if found, timeout := timeoutIn(err); found && timeout {
		return Timeout
	}
	return Failure
}

// timeoutIn is errors.As(err, &t) for t an interface{ Timeout() bool }, and
// t.Timeout(): errors.As's walk (depth first; the first error that has
// Timeout, or whose As method fills t, decides) without handing errors.As a
// target, which escapes through its any parameter: one allocation per failed
// call. Only an error with an As method still gets a target of its own.
func timeoutIn(err error) (found, timeout bool) {
	for err != nil {
		if t, ok := err.(interface{ Timeout() bool }); ok {
			return true, t.Timeout()
		}
		if x, ok := err.(interface{ As(any) bool }); ok {
			// The target's type is what OutcomeOf gave errors.As: an As
			// method may look for exactly this pointer type.
			var t interface{ Timeout() bool }
			if x.As(&t) {
				return true, t.Timeout()
			}
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				if found, timeout := timeoutIn(e); found {
					return true, timeout
				}
			}
			return false, false
		default:
			return false, false
		}
	}
	return false, false
}

// String is the outcome's name ("Success", "Failure", "Timeout", "Cancelled"),
// or "Outcome(n)" for a value the library does not define.
func (o Outcome) String() string {
	switch o {
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	case Timeout:
		return "Timeout"
	case Cancelled:
		return "Cancelled"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}
