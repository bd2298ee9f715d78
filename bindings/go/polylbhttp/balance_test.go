package polylbhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// Weights 100/200/300 take 1/6, 2/6 and 3/6 of the requests, as the servers
// count them.
func TestWeightsAreHonoured(t *testing.T) {
	servers := []*server{startServer(t, ok), startServer(t, ok), startServer(t, ok)}
	eps := endpoints(servers...)
	for i := range eps {
		eps[i].Weight = int32(100 * (i + 1))
	}
	client := &http.Client{Transport: newTransport(t, "loadbalance=random&seed=7", eps)}
	const n = 3000
	for range n {
		if code := mustGet(t, client, "/"); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	for i, s := range servers {
		lo, hi := binomialBounds(n, float64(i+1)/6)
		if got := float64(s.hits.Load()); got < lo || got > hi {
			t.Errorf("weight %d: %v requests, want %.0f..%.0f", 100*(i+1), got, lo, hi)
		}
	}
}

// Under concurrency, peakewma and leastactive send a server 20 ms slower
// than the two others far fewer requests than its third.
func TestSlowEndpointIsAvoided(t *testing.T) {
	for _, config := range []string{"loadbalance=peakewma&seed=3", "loadbalance=leastactive&seed=3"} {
		t.Run(config, func(t *testing.T) {
			slow := startServer(t, func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(20 * time.Millisecond)
				ok(w, r)
			})
			fast := []*server{startServer(t, ok), startServer(t, ok)}
			client := &http.Client{Transport: newTransport(t, config, endpoints(slow, fast[0], fast[1]))}
			const goroutines, each = 6, 100
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						if _, err := get(context.Background(), client, "/"); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			// A uniform pick would give it n/3; 5σ below that is the bound.
			lo, _ := binomialBounds(goroutines*each, 1.0/3)
			got := slow.hits.Load()
			t.Logf("slow server: %d of %d requests", got, goroutines*each)
			if float64(got) >= lo {
				t.Errorf("slow server got %d of %d requests, want < %.0f", got, goroutines*each, lo)
			}
		})
	}
}

// A server answering 503 counts 3 failures in a row and is ejected
// (outlier.consecutiveFailures=3, ejected for 30 s): it sees no more requests.
func TestFailingEndpointIsEjected(t *testing.T) {
	failing := startServer(t, status(http.StatusServiceUnavailable))
	good := []*server{startServer(t, ok), startServer(t, ok)}
	tr := newTransport(t, "loadbalance=random&seed=5&outlier.consecutiveFailures=3", endpoints(failing, good[0], good[1]))
	client := &http.Client{Transport: tr}
	unavailable := 0
	for range 300 {
		if mustGet(t, client, "/") == http.StatusServiceUnavailable {
			unavailable++
		}
	}
	if got := failing.hits.Load(); got != 3 || unavailable != 3 {
		t.Errorf("failing server got %d requests (%d answered 503), want 3", got, unavailable)
	}
	st := stats(t, tr)[failing.URL]
	if st.Failures != 3 || st.Succeeded != 0 {
		t.Errorf("failing server's stats: %d failures, %d successes; want 3 and 0", st.Failures, st.Succeeded)
	}
}

// consistenthash keyed by a header: each key's requests all go to one
// server, and 60 keys reach all four; requests without the header are given
// random keys and spread too.
func TestConsistentHashByHeader(t *testing.T) {
	servers := []*server{startServer(t, ok), startServer(t, ok), startServer(t, ok), startServer(t, ok)}
	client := &http.Client{Transport: newTransport(t, "loadbalance=consistenthash", endpoints(servers...),
		polylbhttp.WithHashKey(polylbhttp.HeaderKey("x-user-id")))}
	served := func(user string) string {
		req, _ := http.NewRequest(http.MethodGet, "http://svc/", nil)
		if user != "" {
			req.Header.Set("X-User-Id", user)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Request.URL.Host // the endpoint that answered
	}
	reached := map[string]bool{}
	for u := range 60 {
		user := fmt.Sprintf("user-%d", u)
		first := served(user)
		reached[first] = true
		for range 4 {
			if got := served(user); got != first {
				t.Fatalf("%s went to %s, then to %s", user, first, got)
			}
		}
	}
	if len(reached) != len(servers) {
		t.Errorf("60 keys reached %d of %d servers", len(reached), len(servers))
	}
	// Without a key: each of the 4 servers misses 100 requests with
	// probability (3/4)^100 = 3e-13 if the keys are random.
	keyless := map[string]bool{}
	for range 100 {
		keyless[served("")] = true
	}
	if len(keyless) != len(servers) {
		t.Errorf("100 requests without a key reached %d of %d servers", len(keyless), len(servers))
	}
}

// A hashing strategy without WithHashKey would send every request to one
// endpoint: New refuses it, naming the option.
func TestAHashingStrategyWithoutAKeyIsRefused(t *testing.T) {
	eps := endpoints(startServer(t, ok), startServer(t, ok))
	for _, strategy := range []string{"consistenthash", "boundedhash", "maglev", "rendezvous"} {
		_, err := polylbhttp.New("loadbalance="+strategy, eps)
		if err == nil || !strings.Contains(err.Error(), "WithHashKey") || !strings.Contains(err.Error(), strategy) {
			t.Fatalf("%s without a key: %v", strategy, err)
		}
		tr, err := polylbhttp.New("loadbalance="+strategy, eps, polylbhttp.WithHashKey(polylbhttp.HeaderKey("X-Key")))
		if err != nil {
			t.Fatalf("%s with a key: %v", strategy, err)
		}
		tr.Close()
	}
	tr, err := polylbhttp.New("loadbalance=random", eps) // needs no key
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
}
