package polylbhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

func TestStatusOutcome(t *testing.T) {
	for code, want := range map[int]polylb.Outcome{
		200: polylb.Success, 204: polylb.Success, 302: polylb.Success,
		400: polylb.Success, 404: polylb.Success, 409: polylb.Success,
		408: polylb.Failure, 429: polylb.Failure,
		500: polylb.Failure, 502: polylb.Failure, 503: polylb.Failure, 599: polylb.Failure,
		504: polylb.Timeout,
		// not 5xx: what every adapter calls a success (docs/outcomes.md)
		600: polylb.Success, 999: polylb.Success, 101: polylb.Success,
	} {
		if got := polylbhttp.StatusOutcome(code); got != want {
			t.Errorf("StatusOutcome(%d) = %v, want %v", code, got, want)
		}
	}
}

// Each way a request can end, as the stats count it: one request to one
// endpoint, then succeeded/failures/timeouts and nothing left in flight
// (a cancel counts in none of the three).
func TestOutcomesInTheStats(t *testing.T) {
	// stall answers after the request's context is done or 5 s.
	stall := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	// halfBody promises 100 bytes, sends 10 and cuts the connection.
	halfBody := func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
		buf.Flush()
		conn.Close()
	}
	type counts struct{ succeeded, failures, timeouts uint64 }
	cases := []struct {
		name    string
		handler http.HandlerFunc
		refused bool
		send    func(client *http.Client) error
		want    counts
	}{
		{name: "200 read to EOF", handler: ok, want: counts{succeeded: 1}},
		{name: "404", handler: status(404), want: counts{succeeded: 1}},
		{name: "503", handler: status(503), want: counts{failures: 1}},
		{name: "429", handler: status(429), want: counts{failures: 1}},
		{name: "504", handler: status(504), want: counts{failures: 1, timeouts: 1}},
		{name: "connection refused", refused: true, want: counts{failures: 1}},
		{name: "body cut short", handler: halfBody, want: counts{failures: 1}},
		{name: "client deadline", handler: stall, want: counts{failures: 1, timeouts: 1},
			send: func(client *http.Client) error {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				_, err := get(ctx, client, "/")
				return err
			}},
		{name: "http.Client.Timeout", handler: stall, want: counts{failures: 1, timeouts: 1},
			send: func(client *http.Client) error {
				timed := *client
				timed.Timeout = 50 * time.Millisecond
				_, err := get(context.Background(), &timed, "/")
				return err
			}},
		{name: "caller's cancel", handler: stall, want: counts{},
			send: func(client *http.Client) error {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(50*time.Millisecond, cancel)
				_, err := get(ctx, client, "/")
				return err
			}},
		{name: "body closed before EOF", handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat("x", 1<<20))
		}, want: counts{}, send: func(client *http.Client) error {
			resp, err := client.Get("http://svc/")
			if err != nil {
				return err
			}
			if _, err := resp.Body.Read(make([]byte, 10)); err != nil {
				return err
			}
			return resp.Body.Close()
		}},
		{name: "caller's cancel while reading the body", handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "first")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, want: counts{}, send: func(client *http.Client) error {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://svc/", nil)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			bufio.NewReader(resp.Body).ReadString('t')
			cancel()
			_, err = io.Copy(io.Discard, resp.Body)
			return err
		}},
		// The usual pattern: decode, then close. The body of a known length
		// reports io.EOF with its last bytes, so the decoder sees the end.
		{name: "json.Decoder then Close", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "13")
			io.WriteString(w, `{"id": 42}`+"\n  ")
		}, want: counts{succeeded: 1}, send: func(client *http.Client) error {
			resp, err := client.Get("http://svc/")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var v struct{ ID int }
			return json.NewDecoder(resp.Body).Decode(&v)
		}},
		{name: "HEAD (no body)", handler: ok, want: counts{succeeded: 1}, send: func(client *http.Client) error {
			resp, err := client.Head("http://svc/")
			if err != nil {
				return err
			}
			// Not closed: the exchange ended with the headers.
			_ = resp
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url := refusedURL(t)
			if !c.refused {
				url = startServer(t, c.handler).URL
			}
			tr := newTransport(t, "loadbalance=random", []polylbhttp.Endpoint{{URL: url}})
			client := &http.Client{Transport: tr}
			send := c.send
			if send == nil {
				send = func(client *http.Client) error {
					_, err := get(context.Background(), client, "/")
					return err
				}
			}
			err := send(client)
			t.Logf("error: %v", err)
			st := stats(t, tr)[url]
			got := counts{st.Succeeded, st.Failures, st.Timeouts}
			if got != c.want || st.Active != 0 || st.Selected != 1 {
				t.Errorf("stats: %+v, %d in flight, %d selected; want %+v, 0, 1", got, st.Active, st.Selected, c.want)
			}
		})
	}
}

// A request is in flight until its body ends, and its latency runs to
// there: a body sent in two halves 100 ms apart.
func TestReportedAtTheBodysEnd(t *testing.T) {
	s := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first half,")
		w.(http.Flusher).Flush()
		time.Sleep(100 * time.Millisecond)
		io.WriteString(w, " second half")
	})
	tr := newTransport(t, "loadbalance=shortestresponse", endpoints(s))
	resp, err := (&http.Client{Transport: tr}).Get("http://svc/")
	if err != nil {
		t.Fatal(err)
	}
	if st := stats(t, tr)[s.URL]; st.Active != 1 || st.Succeeded != 0 {
		t.Errorf("with the headers in: %d in flight, %d succeeded; want 1, 0", st.Active, st.Succeeded)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "first half, second half" {
		t.Fatalf("body %q, %v", body, err)
	}
	if st := stats(t, tr)[s.URL]; st.Active != 0 || st.Succeeded != 1 {
		t.Errorf("at EOF: %d in flight, %d succeeded; want 0, 1", st.Active, st.Succeeded)
	}
	resp.Body.Close()
	latency := meanLatency(t, tr, s.URL)
	if latency < 100*time.Millisecond {
		t.Errorf("latency %v, want the whole body's (>= 100 ms)", latency)
	}

	// ReportAtHeaders: over when the headers are in, latency to them.
	tr = newTransport(t, "loadbalance=shortestresponse", endpoints(s), polylbhttp.ReportAtHeaders())
	resp, err = (&http.Client{Transport: tr}).Get("http://svc/")
	if err != nil {
		t.Fatal(err)
	}
	if st := stats(t, tr)[s.URL]; st.Active != 0 || st.Succeeded != 1 {
		t.Errorf("ReportAtHeaders, headers in: %d in flight, %d succeeded; want 0, 1", st.Active, st.Succeeded)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if latency := meanLatency(t, tr, s.URL); latency >= 100*time.Millisecond {
		t.Errorf("ReportAtHeaders: latency %v, want the headers' (< 100 ms)", latency)
	}
}

// A classifier of one's own decides: here a 404 is the endpoint's failure.
func TestClassifier(t *testing.T) {
	s := startServer(t, status(http.StatusNotFound))
	tr := newTransport(t, "loadbalance=random", endpoints(s), polylbhttp.WithClassifier(func(r *http.Response) polylb.Outcome {
		if r.StatusCode == http.StatusNotFound {
			return polylb.Failure
		}
		return polylbhttp.StatusOutcome(r.StatusCode)
	}))
	mustGet(t, &http.Client{Transport: tr}, "/")
	if st := stats(t, tr)[s.URL]; st.Failures != 1 || st.Active != 0 {
		t.Errorf("%d failures, %d in flight; want 1, 0", st.Failures, st.Active)
	}
}

// A pick that cannot be made is RoundTrip's error: no endpoint, or closed.
func TestNoEndpointAndClosed(t *testing.T) {
	tr := newTransport(t, "loadbalance=random", nil)
	client := &http.Client{Transport: tr}
	if _, err := get(context.Background(), client, "/"); !errors.Is(err, polylb.ErrNoProvider) {
		t.Errorf("no endpoint: %v, want ErrNoProvider", err)
	}
	tr.Close()
	if _, err := get(context.Background(), client, "/"); !errors.Is(err, polylb.ErrClosed) {
		t.Errorf("closed: %v, want ErrClosed", err)
	}
}
