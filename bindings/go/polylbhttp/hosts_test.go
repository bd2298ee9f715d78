package polylbhttp_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// redirectingPair are two endpoints that answer /go with a redirect to
// elsewhere+"/landing", and elsewhere, a site that is not the service.
func redirectingPair(t *testing.T) (a, b, elsewhere *server) {
	elsewhere = startServer(t, ok)
	toElsewhere := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/go" {
			http.Redirect(w, r, elsewhere.URL+"/landing", http.StatusFound)
			return
		}
		ok(w, r)
	}
	return startServer(t, toElsewhere), startServer(t, toElsewhere), elsewhere
}

func selected(t *testing.T, tr *polylbhttp.Transport) (n uint64) {
	for _, s := range stats(t, tr) {
		n += s.Selected
	}
	return n
}

func TestWithHostsOnlyTheServiceIsBalanced(t *testing.T) {
	a, b, elsewhere := redirectingPair(t)
	tr := newTransport(t, "loadbalance=random&seed=3", endpoints(a, b), polylbhttp.WithHosts("SVC"))
	client := &http.Client{Transport: tr}
	for range 20 {
		mustGet(t, client, "/") // http://svc/: balanced, whatever the case of the name
	}
	other := newTransport(t, "loadbalance=random&seed=3", endpoints(a, b), polylbhttp.WithHosts("svc:80"))
	for _, u := range []string{"http://svc/", "http://svc:80/"} {
		resp, err := (&http.Client{Transport: other}).Get(u) // the default port is the same name
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if selected(t, other) != 2 {
		t.Fatalf("svc:80 balanced %d of 2 requests to svc and svc:80", selected(t, other))
	}
	resp, err := client.Get(elsewhere.URL + "/direct")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if a.hits.Load()+b.hits.Load() != 22 || elsewhere.hits.Load() != 1 || selected(t, tr) != 20 {
		t.Fatalf("endpoints %d+%d, elsewhere %d, selected %d", a.hits.Load(), b.hits.Load(),
			elsewhere.hits.Load(), selected(t, tr))
	}
}

func TestWithHostsARedirectElsewhereGoesThere(t *testing.T) {
	for _, hosts := range [][]string{nil, {"svc"}} {
		a, b, elsewhere := redirectingPair(t)
		var opts []polylbhttp.Option
		if hosts != nil {
			opts = append(opts, polylbhttp.WithHosts(hosts...))
		}
		tr := newTransport(t, "loadbalance=random&seed=3", endpoints(a, b), opts...)
		client := &http.Client{Transport: tr}
		for range 10 {
			mustGet(t, client, "/go")
		}
		if hosts == nil {
			// Documented: every request is balanced, the redirect's too.
			if elsewhere.hits.Load() != 0 || a.hits.Load()+b.hits.Load() != 20 || selected(t, tr) != 20 {
				t.Fatalf("without WithHosts: elsewhere %d, endpoints %d, selected %d",
					elsewhere.hits.Load(), a.hits.Load()+b.hits.Load(), selected(t, tr))
			}
			continue
		}
		if elsewhere.hits.Load() != 10 || a.hits.Load()+b.hits.Load() != 10 || selected(t, tr) != 10 {
			t.Fatalf("with WithHosts: elsewhere %d, endpoints %d, selected %d",
				elsewhere.hits.Load(), a.hits.Load()+b.hits.Load(), selected(t, tr))
		}
	}
}
