package polylbhttp_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// Goroutines send while another replaces the set again and again: every
// request is answered, an endpoint that stays keeps its id, and nothing is
// left in flight.
func TestUpdateWhileSending(t *testing.T) {
	servers := []*server{startServer(t, ok), startServer(t, ok), startServer(t, ok), startServer(t, ok)}
	all := endpoints(servers...)
	tr := newTransport(t, "loadbalance=leastactive&seed=9", all)
	anchorID := stats(t, tr)[servers[0].URL].ID
	client := &http.Client{Transport: tr}

	var stop atomic.Bool
	var updates int
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(9, 9))
		for !stop.Load() {
			// servers[0] always stays; each other one with probability 1/2.
			set := all[:1:1]
			for _, ep := range all[1:] {
				if rng.IntN(2) == 0 {
					set = append(set, ep)
				}
			}
			if err := tr.Update(set); err != nil {
				t.Error(err)
				return
			}
			updates++
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if code, err := get(context.Background(), client, "/"); err != nil || code != http.StatusOK {
					t.Errorf("status %d, %v", code, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	<-done
	t.Logf("%d updates during 1200 requests", updates)
	if updates < 10 {
		t.Errorf("only %d updates: the test did not overlap them with requests", updates)
	}
	if err := tr.Update(all); err != nil {
		t.Fatal(err)
	}
	st := stats(t, tr)
	if st[servers[0].URL].ID != anchorID {
		t.Errorf("the endpoint that stayed changed id: %d, then %d", anchorID, st[servers[0].URL].ID)
	}
	for url, inv := range st {
		if inv.Active != 0 {
			t.Errorf("%s: %d in flight", url, inv.Active)
		}
	}
}

// An update that is refused — by the adapter or by polylb — changes nothing:
// the old set keeps its ids and its requests.
func TestRejectedUpdateKeepsTheSet(t *testing.T) {
	a, b := startServer(t, ok), startServer(t, ok)
	// maglev's table of 7 slots holds at most 7 endpoints.
	tr := newTransport(t, "loadbalance=maglev&maglev.tableSize=7", endpoints(a, b),
		polylbhttp.WithHashKey(polylbhttp.HeaderKey("X-Key")))
	before := stats(t, tr)
	eight := endpoints(a, b)
	for i := range 6 {
		eight = append(eight, polylbhttp.Endpoint{URL: "http://10.0.0." + string(rune('1'+i)) + ":80"})
	}
	for name, set := range map[string][]polylbhttp.Endpoint{
		"bad scheme":          {{URL: a.URL}, {URL: "ftp://10.0.0.1"}},
		"a path":              {{URL: a.URL + "/api"}},
		"listed twice":        {{URL: a.URL}, {URL: strings.ToUpper(a.URL[:4]) + a.URL[4:]}},
		"negative weight":     {{URL: a.URL, Weight: -1}},
		"polylb: 8 > 7 slots": eight,
	} {
		err := tr.Update(set)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		t.Logf("%s: %v", name, err)
		if name == "polylb: 8 > 7 slots" && !errors.Is(err, polylb.ErrLimitExceeded) {
			t.Errorf("%s: %v, want ErrLimitExceeded", name, err)
		}
	}
	client := &http.Client{Transport: tr}
	for range 50 {
		mustGet(t, client, "/")
	}
	after := stats(t, tr)
	if len(after) != 2 || after[a.URL].ID != before[a.URL].ID || after[b.URL].ID != before[b.URL].ID {
		t.Errorf("set changed: before %v, after %v", before, after)
	}
	if got := a.hits.Load() + b.hits.Load(); got != 50 {
		t.Errorf("old servers answered %d of 50", got)
	}
}

// The request that reaches the endpoint has the endpoint's host (and Host
// header) and the caller's path, query, method, headers and body.
func TestRequestIsRewritten(t *testing.T) {
	var seen string
	s := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen = r.Method + " " + r.Host + " " + r.URL.RequestURI() + " " + r.Header.Get("X-Trace") + " " + string(body)
	})
	client := &http.Client{Transport: newTransport(t, "", endpoints(s))}
	req, _ := http.NewRequest(http.MethodPost, "http://orders/v1/orders?id=7&x=%2F", strings.NewReader("payload"))
	req.Header.Set("X-Trace", "t1")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := "POST " + strings.TrimPrefix(s.URL, "http://") + " /v1/orders?id=7&x=%2F t1 payload"
	if seen != want {
		t.Errorf("server saw %q, want %q", seen, want)
	}
	if req.URL.Host != "orders" || req.Host != "orders" {
		t.Errorf("the caller's request was modified: %s, Host %s", req.URL, req.Host)
	}
}

// WithMethod keeps the stats (and the strategies' state) per method name.
func TestMethodNames(t *testing.T) {
	s := startServer(t, ok)
	tr := newTransport(t, "loadbalance=shortestresponse", endpoints(s),
		polylbhttp.WithMethod(func(r *http.Request) string { return r.Method + " " + r.URL.Path }))
	client := &http.Client{Transport: tr}
	for range 3 {
		mustGet(t, client, "/a")
	}
	mustGet(t, client, "/b")
	got := map[string]uint64{}
	for _, m := range stats(t, tr)[s.URL].Methods {
		got[m.Method] = m.Succeeded
	}
	if got["GET /a"] != 3 || got["GET /b"] != 1 {
		t.Errorf("per method: %v, want GET /a: 3, GET /b: 1", got)
	}
}
