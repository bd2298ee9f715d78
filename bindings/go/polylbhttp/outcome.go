package polylbhttp

import (
	"context"
	"errors"
	"net/http"

	polylb "github.com/polylb/polylb/bindings/go"
)

// StatusOutcome is the default verdict on an answer with HTTP status code,
// by docs/outcomes.md: 504 (a gateway's timeout) a Timeout; 408, 429 and
// the other 5xx a Failure (the endpoint gave up, is overloaded or broken);
// every other status, 4xx included, a Success: the endpoint answered, and a
// request that is wrong would be refused by any endpoint.
func StatusOutcome(code int) polylb.Outcome {
	switch {
	case code == http.StatusGatewayTimeout:
		return polylb.Timeout
	case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return polylb.Failure
	}
	return polylb.Success
}

func defaultClassifier(resp *http.Response) polylb.Outcome {
	return StatusOutcome(resp.StatusCode)
}

// errorOutcome judges a request that ended with err, before or while its
// response was read. The request's context says who ended it when it is done:
// the transport's error for it is not always the context's (a read cut by the
// cancel fails with the closed connection's error), and a caller's cancel must
// not count against the endpoint. Otherwise polylb.OutcomeOf decides: a
// timeout error a Timeout, anything else (a refused or reset connection, a
// body cut short) a Failure.
func errorOutcome(ctx context.Context, err error) polylb.Outcome {
	switch ctxErr := ctx.Err(); {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return polylb.Timeout
	case ctxErr != nil && polylb.OutcomeOf(err) != polylb.Timeout:
		return polylb.Cancelled
	}
	return polylb.OutcomeOf(err)
}
