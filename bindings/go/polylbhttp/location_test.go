package polylbhttp_test

import (
	"io"
	"net/http"
	"testing"
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
