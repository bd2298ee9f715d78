package polylbhttp

import (
	"context"
	"net/http"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// StatusOutcome is the default verdict on an answer with HTTP status code,
// by docs/outcomes.md: 504 (a gateway's timeout) a Timeout; 408, 429 and
// the other 5xx a Failure (the endpoint gave up, is overloaded or broken);
// every other status, 4xx included, a Success: the endpoint answered, and a
// request that is wrong would be refused by any endpoint. A code past 599
// (net/http takes any three digits) is no 5xx: a Success, as polylb-spring,
// polylb-tower and polylb.httpx read it.
func StatusOutcome(code int) polylb.Outcome {
	switch {
	case code == http.StatusGatewayTimeout:
		return polylb.Timeout
	case code >= 500 && code <= 599, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return polylb.Failure
	}
	return polylb.Success
}

func defaultClassifier(resp *http.Response) polylb.Outcome {
	return StatusOutcome(resp.StatusCode)
}

// errorOutcome judges a request that ended with err, before or while its
// response was read; cancel is the request's (deprecated) Cancel channel.
// Who ended the request is asked first: the transport's error for it is not
// always the context's (a read cut by the cancel fails with the closed
// connection's error), and a caller's cancel must not count against the
// endpoint. A deadline is read from the clock, not from ctx.Err():
// http.Client.Timeout closes the request's Cancel channel as the context's
// deadline passes, and the transport may return "request canceled" for the
// channel before the context says it expired. Otherwise polylb.OutcomeOf
// decides: a timeout error a Timeout, anything else (a refused or reset
// connection, a body cut short) a Failure.
func errorOutcome(ctx context.Context, cancel <-chan struct{}, err error) polylb.Outcome {
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return polylb.Timeout
	}
	outcome := polylb.OutcomeOf(err)
	if outcome != polylb.Timeout && (ctx.Err() != nil || closed(cancel)) {
		return polylb.Cancelled
	}
	return outcome
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// over tells a request whose context is done, its deadline passed (by the
// clock, as errorOutcome reads it) or its Cancel channel closed.
func over(ctx context.Context, cancel <-chan struct{}) bool {
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return true
	}
	return ctx.Err() != nil || closed(cancel)
}
