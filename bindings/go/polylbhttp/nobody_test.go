package polylbhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// Over HTTP/2 a response without a body is not http.NoBody: a HEAD, a 204
// and an empty 200 are still over at their headers, as over HTTP/1 (a HEAD's
// body left unclosed, the others closed unread).
func TestNoBodyOverHTTP2(t *testing.T) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/empty":
		default:
			io.WriteString(w, "ok")
		}
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	tr := newTransport(t, "loadbalance=random", []polylbhttp.Endpoint{{URL: s.URL}},
		polylbhttp.WithTransport(s.Client().Transport))
	client := &http.Client{Transport: tr}

	resp, err := client.Head("http://svc/")
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("proto %s, want HTTP/2", resp.Proto)
	}
	// Not closed: the exchange ended with the headers.
	if st := stats(t, tr)[s.URL]; st.Active != 0 || st.Succeeded != 1 {
		t.Errorf("HEAD: %d in flight, %d succeeded; want 0, 1", st.Active, st.Succeeded)
	}
	for i, path := range []string{"/204", "/empty"} {
		resp, err := client.Get("http://svc" + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if st := stats(t, tr)[s.URL]; st.Active != 0 || st.Succeeded != uint64(i+2) {
			t.Errorf("GET %s closed unread: %d in flight, %d succeeded; want 0, %d", path, st.Active, st.Succeeded, i+2)
		}
	}
}
