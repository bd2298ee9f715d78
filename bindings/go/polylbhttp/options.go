package polylbhttp

import (
	"net/http"
	"strings"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Option configures a Transport (New).
type Option func(*Transport)

// WithTransport sends the balanced requests through rt (default:
// http.DefaultTransport). Its connection pool, timeouts and TLS settings
// apply per endpoint as usual.
func WithTransport(rt http.RoundTripper) Option {
	return func(t *Transport) { t.inner = rt }
}

// WithMethod names each request's method, the unit polylb keeps its
// per-method state by (round-robin positions, latency windows,
// shortestresponse's and peakewma's estimates). By default all requests
// share one method, polylb.ServiceLevel.
//
// The names must come from a small, fixed set — a route ("GET /orders/{id}"),
// an RPC name — never from the raw path or a query: each name is kept for the
// balancer's life, with state per endpoint, and past polylb's limit (2^20
// names) RoundTrip fails with polylb.ErrLimitExceeded.
func WithMethod(name func(*http.Request) string) Option {
	return func(t *Transport) { t.methodName = name }
}

// WithHashKey gives each request's key to the hashing strategies
// (consistenthash, boundedhash, maglev, rendezvous); the others ignore it.
// A request whose key is empty is given a random one, so that requests
// without a key spread over the endpoints instead of all hashing the empty
// key to one (as polylb-spring and Envoy do). HeaderKey reads a header. The
// hashing strategies need it: New refuses them without it.
func WithHashKey(key func(*http.Request) []byte) Option {
	return func(t *Transport) { t.hashKey = key }
}

// HeaderKey is a WithHashKey function: the first value of the header name.
func HeaderKey(name string) func(*http.Request) []byte {
	name = http.CanonicalHeaderKey(name)
	return func(req *http.Request) []byte {
		if v := req.Header[name]; len(v) > 0 {
			return []byte(v[0])
		}
		return nil
	}
}

// WithClassifier replaces the verdict on a response (default: StatusOutcome
// of its status code), e.g. to call a 404 a failure for a service that never
// answers one unless an endpoint is misdeployed. A Success is reported when
// the body ends (see Transport); any other outcome at once.
func WithClassifier(classify func(*http.Response) polylb.Outcome) Option {
	return func(t *Transport) { t.classify = classify }
}

// WithRetries sends a request whose connection could not be made (refused,
// no route, a name that does not resolve: it never reached an endpoint, so
// no request is applied twice) again, to an endpoint not tried yet, up to n
// more times (default 0). Each attempt is reported on its own (a refused
// connection is a failure of its endpoint). A request with a body is sent
// again only if it has GetBody (http.NewRequest sets it for in-memory
// bodies); a dial that timed out, a request whose context is over and every
// other error are returned at once. When no endpoint is left to try (every
// one tried, the set emptied, the Transport closed meanwhile), the last
// attempt's error is returned.
func WithRetries(n int) Option {
	return func(t *Transport) { t.retries = n }
}

// WithHosts balances only the requests whose URL host is one of names (a
// host, which matches any port, or host:port, the scheme's default port
// when the URL has none; compared ignoring case) — the logical names the service is
// called by, such as "orders" for http://orders/... — and sends every other
// request straight through the inner transport, unbalanced and unreported.
// Without it every request is balanced, a redirect to another host too:
// with it, a provider's redirect to another site goes there.
func WithHosts(names ...string) Option {
	return func(t *Transport) {
		t.hosts = make(map[string]bool, len(names))
		for _, name := range names {
			t.hosts[strings.ToLower(name)] = true
		}
	}
}

// ReportAtHeaders reports every request when its response headers arrive,
// instead of when its body ends: for long streams (server-sent events, long
// polling) that should not count as in flight, nor their life as latency,
// while they are read. The latency is then the time to the headers, and a
// body that fails midway is not seen.
func ReportAtHeaders() Option {
	return func(t *Transport) { t.atHeaders = true }
}
