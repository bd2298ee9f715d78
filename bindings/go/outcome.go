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
//     error in the chain whose Timeout() is true: net.Error, *url.Error,
//     also under one whose Timeout() is false): Timeout;
//   - context.Canceled: Cancelled (your code gave the call up: no verdict on
//     the provider, so only the in-flight count is undone), unless the tree
//     (a joined error) holds a timeout too, which wins;
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
	// os.ErrDeadlineExceeded by identity too, whatever Timeout() says.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return Timeout
	}
	// Any timeout in the tree before a cancel, as for the deadlines above: a
	// joined error (errors.Join of a reader's and a writer's, say) that holds
	// a net.Error's timeout and the context.Canceled its siblings returned
	// once the first gave up is the provider's timeout, not this side's cancel.
	if timeoutIn(err) {
		return Timeout
	}
	if errors.Is(err, context.Canceled) {
		return Cancelled
	}
	return Failure
}

// timeoutIn reports whether any error in err's tree (depth first, as
// errors.As walks it) has a Timeout() that is true, also past one whose
// Timeout() is false: *url.Error's Timeout() looks one level down only, so a
// transport's timeout under a middleware's fmt.Errorf("...: %w") read false
// there. It walks without handing errors.As a target, which escapes through
// its any parameter: one allocation per failed call. Only an error with an As
// method still gets a target of its own.
func timeoutIn(err error) bool {
	for err != nil {
		if t, ok := err.(interface{ Timeout() bool }); ok && t.Timeout() {
			return true
		}
		if x, ok := err.(interface{ As(any) bool }); ok {
			// The target's type is what OutcomeOf gave errors.As: an As
			// method may look for exactly this pointer type.
			var t interface{ Timeout() bool }
			if x.As(&t) && t.Timeout() {
				return true
			}
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				if timeoutIn(e) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
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
