package polylbhttp_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	polylb "github.com/polylb/polylb/bindings/go"
	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// refusedEndpoints are n endpoints on ports nothing listens on.
func refusedEndpoints(t *testing.T, n int) []polylbhttp.Endpoint {
	eps := make([]polylbhttp.Endpoint, n)
	for i := range eps {
		eps[i] = polylbhttp.Endpoint{URL: refusedURL(t)}
	}
	return eps
}

func isRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func TestRetriesSendARefusedRequestToAnotherEndpoint(t *testing.T) {
	live := startServer(t, ok)
	eps := append(refusedEndpoints(t, 2), endpoints(live)...)
	tr := newTransport(t, "loadbalance=random&seed=5", eps, polylbhttp.WithRetries(2))
	client := &http.Client{Transport: tr}
	const n = 200
	for range n {
		if code := mustGet(t, client, "/"); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	st := stats(t, tr)
	if got := st[live.URL].Succeeded; got != n || live.hits.Load() != n {
		t.Fatalf("live endpoint: %d successes, %d hits; want %d", got, live.hits.Load(), n)
	}
	var refused uint64
	for _, ep := range eps[:2] {
		s := st[ep.URL]
		if s.Failures != s.Selected || s.Active != 0 {
			t.Fatalf("%s: %+v: every attempt a failure, none in flight", ep.URL, s)
		}
		refused += s.Failures
	}
	// A uniform first pick is refused 2/3 of the time, and half of the
	// retries go to the other refused endpoint: about 133 + 67 = 200
	// attempts refused; at the very least more than a third of them.
	if refused < n/3 {
		t.Fatalf("%d refused attempts: the test did not exercise retries", refused)
	}
}

func TestWithoutRetriesARefusedRequestFails(t *testing.T) {
	live := startServer(t, ok)
	eps := append(refusedEndpoints(t, 1), endpoints(live)...)
	tr := newTransport(t, "loadbalance=random&seed=5", eps)
	client := &http.Client{Transport: tr}
	failed := 0
	for range 100 {
		if _, err := get(t.Context(), client, "/"); err != nil {
			if !isRefused(err) {
				t.Fatalf("unexpected error %v", err)
			}
			failed++
		}
	}
	if got := stats(t, tr)[eps[0].URL].Failures; failed == 0 || uint64(failed) != got {
		t.Fatalf("%d requests failed, %d failures reported", failed, got)
	}
}

func TestARetriedRequestCarriesItsBodyAgain(t *testing.T) {
	const payload = "the same bytes on every attempt"
	var wrong atomic.Int64
	live := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); string(b) != payload {
			wrong.Add(1)
		}
		ok(w, r)
	})
	eps := append(refusedEndpoints(t, 1), endpoints(live)...)
	tr := newTransport(t, "loadbalance=random&seed=9", eps, polylbhttp.WithRetries(1))
	client := &http.Client{Transport: tr}
	for range 60 {
		// strings.Reader: http.NewRequest sets GetBody.
		req, _ := http.NewRequest(http.MethodPost, "http://svc/", strings.NewReader(payload))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if refused := stats(t, tr)[eps[0].URL].Failures; refused == 0 || wrong.Load() != 0 || live.hits.Load() != 60 {
		t.Fatalf("%d refused attempts, %d bodies wrong, %d hits", refused, wrong.Load(), live.hits.Load())
	}
}

func TestABodyThatCannotBeSentAgainIsNotRetried(t *testing.T) {
	live := startServer(t, ok)
	eps := append(refusedEndpoints(t, 1), endpoints(live)...)
	tr := newTransport(t, "loadbalance=random&seed=9", eps, polylbhttp.WithRetries(3))
	client := &http.Client{Transport: tr}
	failed := 0
	for range 60 {
		// A reader http.NewRequest does not know: no GetBody.
		body := io.MultiReader(bytes.NewReader([]byte("once")))
		req, _ := http.NewRequest(http.MethodPost, "http://svc/", body)
		resp, err := client.Do(req)
		if err != nil {
			if !isRefused(err) {
				t.Fatalf("unexpected error %v", err)
			}
			failed++
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	st := stats(t, tr)
	if failed == 0 || uint64(failed) != st[eps[0].URL].Selected || st[live.URL].Selected != uint64(60-failed) {
		t.Fatalf("%d failed; refused endpoint %+v; live %+v", failed, st[eps[0].URL], st[live.URL])
	}
}

func TestWhenEveryEndpointRefusesTheLastErrorIsReturned(t *testing.T) {
	eps := refusedEndpoints(t, 2)
	tr := newTransport(t, "loadbalance=random&seed=1", eps, polylbhttp.WithRetries(5))
	client := &http.Client{Transport: tr}
	for range 20 {
		_, err := get(t.Context(), client, "/")
		if !isRefused(err) || errors.Is(err, polylb.ErrNoCandidate) {
			t.Fatalf("got %v, want the refused connection's error", err)
		}
	}
	for _, ep := range eps {
		// Each request tried both endpoints once: no endpoint twice.
		if s := stats(t, tr)[ep.URL]; s.Selected != 20 || s.Failures != 20 || s.Active != 0 {
			t.Fatalf("%s: %+v", ep.URL, s)
		}
	}
}

// hookTransport runs hook before its first request, then sends every
// request through an http.Transport of its own.
type hookTransport struct {
	hook  func()
	once  sync.Once
	inner http.Transport
}

func (h *hookTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	h.once.Do(h.hook)
	return h.inner.RoundTrip(req)
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closes *atomic.Int64
}

func (c closeCounter) Close() error {
	c.closes.Add(1)
	return nil
}

// A retry that cannot be picked (the Transport closed, or every endpoint
// removed, while the refused attempt was in flight) ends the request with
// that attempt's error, as when every endpoint has been tried; each body is
// closed once.
func TestAnUnpickableRetryReturnsTheAttemptsError(t *testing.T) {
	for _, tc := range []struct {
		name string
		hook func(*polylbhttp.Transport)
	}{
		{"Close", func(tr *polylbhttp.Transport) { tr.Close() }},
		{"Update to no endpoint", func(tr *polylbhttp.Transport) {
			if err := tr.Update(nil); err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr *polylbhttp.Transport
			inner := &hookTransport{hook: func() { tc.hook(tr) }}
			defer inner.inner.CloseIdleConnections()
			tr = newTransport(t, "loadbalance=roundrobin", refusedEndpoints(t, 2),
				polylbhttp.WithRetries(1), polylbhttp.WithTransport(inner))
			var first, again atomic.Int64
			req, _ := http.NewRequest(http.MethodPost, "http://svc/", nil)
			req.Body = closeCounter{strings.NewReader("x"), &first}
			req.ContentLength = 1
			req.GetBody = func() (io.ReadCloser, error) {
				return closeCounter{strings.NewReader("x"), &again}, nil
			}
			_, err := (&http.Client{Transport: tr}).Do(req)
			if !isRefused(err) || errors.Is(err, polylb.ErrClosed) || errors.Is(err, polylb.ErrNoProvider) {
				t.Errorf("got %v, want the refused connection's error", err)
			}
			if first.Load() != 1 || again.Load() != 1 {
				t.Errorf("bodies closed %d and %d times, want once each", first.Load(), again.Load())
			}
		})
	}
}
