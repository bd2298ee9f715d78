package polylbhttp_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// A redirect built from the Host the endpoint got (an absolute Location
// naming the endpoint itself) stays a redirect within the service: the
// client keeps the Authorization header, and the Location the caller sees
// (http.Client's CheckRedirect, ErrUseLastResponse) names the service.
func TestRedirectToTheEndpointItself(t *testing.T) {
	s := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "http://"+r.Host+"/new?q=1", http.StatusFound)
			return
		}
		io.WriteString(w, r.Header.Get("Authorization"))
	})
	tr := newTransport(t, "loadbalance=random", endpoints(s))
	req, err := http.NewRequest(http.MethodGet, "http://svc/old", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer t0ken")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "Bearer t0ken" {
		t.Errorf("Authorization after the redirect: %q, %v; want %q", body, err, "Bearer t0ken")
	}

	resp, err = tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "http://svc/new?q=1" {
		t.Errorf("Location %q, want http://svc/new?q=1", loc)
	}
	if st := stats(t, tr)[s.URL]; st.Active != 0 {
		t.Errorf("%d in flight, want 0", st.Active)
	}
}

// An endpoint's origin written with the scheme's default port, or a Location
// that writes it, is still the endpoint's own: renamed, as polylb.httpx does.
func TestRedirectToTheEndpointItselfDefaultPort(t *testing.T) {
	for _, c := range []struct{ endpoint, location string }{
		{"http://10.0.0.1:80", "http://10.0.0.1/next"},
		{"http://10.0.0.1", "http://10.0.0.1:80/next"},
		{"https://10.0.0.1", "https://10.0.0.1:443/next"},
		{"http://Host.example:8080", "http://host.example:8080/next"},
	} {
		inner := roundTripper(func(r *http.Request) (*http.Response, error) {
			h := http.Header{"Location": {c.location}}
			return &http.Response{StatusCode: http.StatusFound, Header: h, Body: http.NoBody, Request: r}, nil
		})
		tr := newTransport(t, "loadbalance=random", []polylbhttp.Endpoint{{URL: c.endpoint}}, polylbhttp.WithTransport(inner))
		req, _ := http.NewRequest(http.MethodGet, "http://svc/old", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if loc := resp.Header.Get("Location"); loc != "http://svc/next" {
			t.Errorf("endpoint %s, Location %s: renamed to %q, want http://svc/next", c.endpoint, c.location, loc)
		}
	}
	// Another port is another origin: left as it is.
	inner := roundTripper(func(r *http.Request) (*http.Response, error) {
		h := http.Header{"Location": {"http://10.0.0.1:81/next"}}
		return &http.Response{StatusCode: http.StatusFound, Header: h, Body: http.NoBody, Request: r}, nil
	})
	tr := newTransport(t, "loadbalance=random", []polylbhttp.Endpoint{{URL: "http://10.0.0.1"}}, polylbhttp.WithTransport(inner))
	req, _ := http.NewRequest(http.MethodGet, "http://svc/old", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if loc := resp.Header.Get("Location"); loc != "http://10.0.0.1:81/next" {
		t.Errorf("Location %q, want it left as http://10.0.0.1:81/next", loc)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
