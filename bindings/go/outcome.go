//go:build cgo

package polylb

import (
	"context"
	"errors"
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
	if errors.Is(err, context.DeadlineExceeded) {
		return Timeout
	}
	if errors.Is(err, context.Canceled) {
		return Cancelled
	}
	var t interface{ Timeout() bool }
	if errors.As(err, &t) && t.Timeout() {
		return Timeout
	}
	return Failure
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
