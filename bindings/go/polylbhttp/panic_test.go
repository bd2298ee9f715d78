package polylbhttp_test

import (
	"net/http"
	"testing"

	polylb "github.com/polylb/polylb/bindings/go"
	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

// A classifier that panics (a bug in the caller's code, recovered above, as
// net/http's server recovers a handler's panic) still ends the request: a
// cancel, nothing left in flight on the endpoint.
func TestClassifierPanicEndsTheRequest(t *testing.T) {
	s := startServer(t, ok)
	tr := newTransport(t, "loadbalance=random", endpoints(s),
		polylbhttp.WithClassifier(func(*http.Response) polylb.Outcome { panic("classifier bug") }))
	func() {
		defer func() {
			if r := recover(); r != "classifier bug" {
				t.Errorf("recovered %v, want the classifier's panic", r)
			}
		}()
		(&http.Client{Transport: tr}).Get("http://svc/")
	}()
	if st := stats(t, tr)[s.URL]; st.Active != 0 || st.Selected != 1 || st.Succeeded+st.Failures != 0 {
		t.Errorf("%d in flight, %d selected, %d succeeded, %d failures; want 0, 1, 0, 0",
			st.Active, st.Selected, st.Succeeded, st.Failures)
	}
}
