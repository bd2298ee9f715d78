package polylbhttp_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// A request whose deadline was spent before it was sent (a deadline
// inherited from an incoming request, say) never reaches the endpoint: a
// cancel, not a timeout of the endpoint (docs/outcomes.md).
func TestSpentDeadlineIsNotTheEndpoints(t *testing.T) {
	s := startServer(t, ok)
	tr := newTransport(t, "loadbalance=random", endpoints(s))
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := get(ctx, &http.Client{Transport: tr}, "/"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want DeadlineExceeded", err)
	}
	if n := s.hits.Load(); n != 0 {
		t.Fatalf("the endpoint got %d requests, want 0", n)
	}
	if st := stats(t, tr)[s.URL]; st.Failures != 0 || st.Timeouts != 0 || st.Active != 0 || st.Selected != 1 {
		t.Errorf("%d failures, %d timeouts, %d in flight, %d selected; want 0, 0, 0, 1",
			st.Failures, st.Timeouts, st.Active, st.Selected)
	}
}
