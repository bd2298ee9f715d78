package polylbhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// BenchmarkRoundTrip: a GET to a local server read to its end, through a
// plain http.Transport and through a Transport over the same one with one
// endpoint, so the difference is the adapter's own work per request (select,
// request copy, body wrapper, report).
func BenchmarkRoundTrip(b *testing.B) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer s.Close()
	inner := &http.Transport{MaxIdleConnsPerHost: 16}
	defer inner.CloseIdleConnections()
	balanced, err := polylbhttp.New("loadbalance=leastactive", []polylbhttp.Endpoint{{URL: s.URL}},
		polylbhttp.WithTransport(inner))
	if err != nil {
		b.Fatal(err)
	}
	defer balanced.Close()
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
		url  string
	}{{"plain", inner, s.URL + "/x"}, {"polylbhttp", balanced, "http://svc/x"}} {
		b.Run(c.name, func(b *testing.B) {
			req, _ := http.NewRequest(http.MethodGet, c.url, nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// canned answers every request at once with a 2-byte body, without a network.
type canned struct{}

func (canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(&onceReader{}), Request: req}, nil
}

type onceReader struct{ done bool }

func (r *onceReader) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	r.done = true
	return copy(p, "ok"), io.EOF
}

// BenchmarkAdapterOnly is the adapter's own work per request alone: the
// inner RoundTripper answers without a network ("inner" is that answer by
// itself).
func BenchmarkAdapterOnly(b *testing.B) {
	balanced, err := polylbhttp.New("loadbalance=leastactive", []polylbhttp.Endpoint{{URL: "http://10.0.0.1:8080"}},
		polylbhttp.WithTransport(canned{}))
	if err != nil {
		b.Fatal(err)
	}
	defer balanced.Close()
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{{"inner", canned{}}, {"polylbhttp", balanced}} {
		b.Run(c.name, func(b *testing.B) {
			req, _ := http.NewRequest(http.MethodGet, "http://svc/x", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
