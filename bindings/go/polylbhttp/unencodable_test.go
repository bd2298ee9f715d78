package polylbhttp_test

import (
	"net/http"
	"testing"
)

// A request net/http refuses to write (a header value with a newline, a
// header name or method that is not a token) never reaches the endpoint: no
// verdict on it (docs/outcomes.md: "the request could not be encoded"), as
// polylb.httpx reports h11's LocalProtocolError; not a failure.
func TestUnencodableRequestIsNoFailure(t *testing.T) {
	for name, mutate := range map[string]func(*http.Request){
		"header value": func(r *http.Request) { r.Header["X-Bad"] = []string{"a\nb"} },
		"header name":  func(r *http.Request) { r.Header["X Bad"] = []string{"v"} },
		"method":       func(r *http.Request) { r.Method = "GE T" },
	} {
		s := startServer(t, ok)
		tr := newTransport(t, "loadbalance=random", endpoints(s))
		req, _ := http.NewRequest(http.MethodGet, "http://svc/", nil)
		mutate(req)
		if _, err := tr.RoundTrip(req); err == nil {
			t.Fatalf("%s: sent", name)
		}
		st := stats(t, tr)[s.URL]
		if s.hits.Load() != 0 || st.Failures != 0 || st.Active != 0 {
			t.Errorf("%s: hits %d, failures %d, active %d; want 0, 0, 0", name, s.hits.Load(), st.Failures, st.Active)
		}
	}
}
