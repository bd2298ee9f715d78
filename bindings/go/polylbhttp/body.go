package polylbhttp

import (
	"context"
	"io"
	"sync/atomic"

	polylb "github.com/polylb/polylb/bindings/go"
)

// exchange is one request's call, and the response body that ends it when
// the verdict waits for the body (see Transport).
type exchange struct {
	call   polylb.Call
	ended  atomic.Bool // Read and Close may race (Close to unblock a Read)
	body   io.ReadCloser
	ctx    context.Context
	cancel <-chan struct{} // the request's Cancel (http.Client.Timeout closes it)
	key    [8]byte         // a random hash key, for a request without one
}

func (x *exchange) Read(p []byte) (int, error) {
	n, err := x.body.Read(p)
	switch {
	case err == io.EOF:
		x.finish(polylb.Success)
	case err != nil:
		x.finish(errorOutcome(x.ctx, x.cancel, err))
	}
	return n, err
}

// Close before io.EOF gives the response up: no verdict on the endpoint.
func (x *exchange) Close() error {
	x.finish(polylb.Cancelled)
	return x.body.Close()
}

// finish reports the call once; the first of Read's end and Close decides.
func (x *exchange) finish(outcome polylb.Outcome) {
	if x.ended.CompareAndSwap(false, true) {
		x.call.Finish(outcome)
	}
}
