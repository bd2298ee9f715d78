package polylbhttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// After requests ended every way at once — read to the end, closed early,
// 503, cancelled or timed out mid-request or mid-body, refused — nothing is
// left in flight, and each request was selected once.
func TestInFlightBackToZeroAfterAMix(t *testing.T) {
	handler := func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/503":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/big":
			io.WriteString(w, strings.Repeat("x", 256<<10))
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(time.Duration(r.URL.Query().Get("ms")[0]-'0') * 10 * time.Millisecond):
			}
			io.WriteString(w, "late")
		case "/stalled-body":
			io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Millisecond):
			}
		default:
			io.WriteString(w, "ok")
		}
	}
	eps := endpoints(startServer(t, handler), startServer(t, handler), startServer(t, handler))
	eps = append(eps, polylbhttp.Endpoint{URL: refusedURL(t)})
	// random, with no ejection: the refused endpoint keeps its quarter
	// (leastactive would give it most, as it fails at once).
	tr := newTransport(t, "loadbalance=random&seed=11", eps)
	client := &http.Client{Transport: tr}

	kinds := []func(i int){
		func(int) { get(context.Background(), client, "/") },
		func(int) { get(context.Background(), client, "/503") },
		func(int) { // closed after 10 bytes of 256 KiB
			if resp, err := client.Get("http://svc/big"); err == nil {
				resp.Body.Read(make([]byte, 10))
				resp.Body.Close()
			}
		},
		func(i int) { // a deadline that passes before or after the answer
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			get(ctx, client, "/slow?ms="+string(rune('0'+i%4)))
		},
		func(int) { // the caller cancels mid-body
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://svc/stalled-body", nil)
			if resp, err := client.Do(req); err == nil {
				resp.Body.Read(make([]byte, 4))
				cancel()
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cancel()
		},
	}
	const goroutines, each = 6, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				kinds[(g+i)%len(kinds)](i)
			}
		}()
	}
	wg.Wait()
	var selected uint64
	for url, inv := range stats(t, tr) {
		selected += inv.Selected
		t.Logf("%s: selected %d, succeeded %d, failures %d, timeouts %d", url, inv.Selected, inv.Succeeded, inv.Failures, inv.Timeouts)
		if inv.Active != 0 {
			t.Errorf("%s: %d in flight", url, inv.Active)
		}
	}
	if selected != goroutines*each {
		t.Errorf("%d selects for %d requests", selected, goroutines*each)
	}
}
