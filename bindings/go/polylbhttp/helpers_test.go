package polylbhttp_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// server is an httptest server that counts the requests it was sent.
type server struct {
	*httptest.Server
	hits atomic.Int64
}

func startServer(t *testing.T, handler http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		handler(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func ok(w http.ResponseWriter, _ *http.Request) {
	io.WriteString(w, "ok")
}

func status(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		io.WriteString(w, http.StatusText(code))
	}
}

// refusedURL is the URL of a port nothing listens on any more.
func refusedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func endpoints(servers ...*server) []polylbhttp.Endpoint {
	var eps []polylbhttp.Endpoint
	for _, s := range servers {
		eps = append(eps, polylbhttp.Endpoint{URL: s.URL})
	}
	return eps
}

func newTransport(t *testing.T, config string, eps []polylbhttp.Endpoint, opts ...polylbhttp.Option) *polylbhttp.Transport {
	t.Helper()
	tr, err := polylbhttp.New(config, eps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// get sends a GET for path to the logical service "svc", reads the body to
// its end and closes it.
func get(ctx context.Context, client *http.Client, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://svc"+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

func mustGet(t *testing.T, client *http.Client, path string) int {
	t.Helper()
	code, err := get(context.Background(), client, path)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// stats maps each endpoint's URL to its invoker's stats.
func stats(t *testing.T, tr *polylbhttp.Transport) map[string]polylb.InvokerStats {
	t.Helper()
	s, err := tr.Balancer().Stats()
	if err != nil {
		t.Fatal(err)
	}
	byURL := map[string]polylb.InvokerStats{}
	for _, inv := range s.Invokers {
		byURL[inv.Address] = inv
	}
	return byURL
}

// binomialBounds is the range within 5 standard deviations of the mean of
// n draws of probability p: a count outside it is a broken balancer, not
// bad luck (p < 6e-7).
func binomialBounds(n int, p float64) (lo, hi float64) {
	mean := float64(n) * p
	sigma := math.Sqrt(float64(n) * p * (1 - p))
	return mean - 5*sigma, mean + 5*sigma
}

// meanLatency is the mean latency of the endpoint's successes, as reported.
func meanLatency(t *testing.T, tr *polylbhttp.Transport, url string) time.Duration {
	t.Helper()
	var us int64
	if err := json.Unmarshal(stats(t, tr)[url].Extra["mean_success_us"], &us); err != nil {
		t.Fatal(err)
	}
	return time.Duration(us) * time.Microsecond
}
