// Package polylbhttp balances net/http requests over a set of HTTP endpoints
// with polylb: Transport is an http.RoundTripper that picks an endpoint for
// each request, sends it there through an inner RoundTripper, and reports the
// request's outcome and latency to polylb. See README.md.
package polylbhttp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Transport is an http.RoundTripper that balances requests over endpoints.
// A request's URL host is only a name (a logical service name, say): it is
// replaced by the chosen endpoint's scheme and host; path and query are
// kept. Use it as an http.Client's Transport. It is safe for concurrent use,
// Update included.
//
// When a request is over: a response with a Success verdict (a 2xx, 3xx or
// 4xx but 408 and 429, by default) is reported when its body ends — read to
// io.EOF: a Success; a read error: judged as a transport error; closed
// before io.EOF: Cancelled (the caller gave it up). Until then the request
// counts as in flight, and its latency is to the body's end. Any other
// verdict (a 5xx, 408, 429, 504) is reported when the headers arrive, as is a
// response without a body. So close every response body, as net/http asks: a
// body never closed stays in flight on its endpoint for good.
type Transport struct {
	lb         *polylb.Balancer
	inner      http.RoundTripper
	methodName func(*http.Request) string
	hashKey    func(*http.Request) []byte
	classify   func(*http.Response) polylb.Outcome
	atHeaders  bool
	retries    int
	hosts      map[string]bool // nil: every request is balanced

	methodsMu sync.RWMutex
	methods   map[string]polylb.Method

	set atomic.Pointer[endpointSet]

	updateMu sync.Mutex // serializes Update; guards ids and lastID
	ids      map[string]uint64
	lastID   uint64
}

// New makes a Transport balancing over endpoints with a polylb balancer of
// config (polylb.New's config string, e.g. "loadbalance=peakewma").
func New(config string, endpoints []Endpoint, opts ...Option) (*Transport, error) {
	lb, err := polylb.New(config)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		lb:       lb,
		inner:    http.DefaultTransport,
		classify: defaultClassifier,
		methods:  map[string]polylb.Method{},
		ids:      map[string]uint64{},
	}
	t.set.Store(&endpointSet{})
	for _, opt := range opts {
		opt(t)
	}
	if err := t.checkHashKey(); err != nil {
		lb.Close()
		return nil, err
	}
	if err := t.Update(endpoints); err != nil {
		lb.Close()
		return nil, err
	}
	return t, nil
}

// Update replaces the set of endpoints. An endpoint whose URL was in the
// previous set keeps its state; requests in flight to one that left end as
// usual. A set that is refused (a bad URL, a URL listed twice, a negative
// weight, or polylb's own refusal) changes nothing.
func (t *Transport) Update(endpoints []Endpoint) error {
	t.updateMu.Lock()
	defer t.updateMu.Unlock()
	next, err := plan(endpoints, t.ids, t.lastID)
	if err != nil {
		return err
	}
	old := t.set.Load()
	// Selects made while the balancer switches may return an id of either
	// set: publish both first, so that the new ids are found at once.
	t.set.Store(union(old, next.byID))
	if err := t.lb.Update(next.invokers); err != nil {
		t.set.Store(old)
		return fmt.Errorf("polylbhttp: update: %w", err)
	}
	t.set.Store(&endpointSet{byID: next.byID})
	t.ids, t.lastID = next.ids, next.nextID
	return nil
}

// Balancer is the polylb balancer underneath, for its Stats (the invokers'
// addresses are the endpoints' URLs). Selecting or reporting on it directly
// is not needed and would skew its counts.
func (t *Transport) Balancer() *polylb.Balancer {
	return t.lb
}

// Close closes the balancer: later requests fail with polylb.ErrClosed.
// Requests in flight end normally. It does not close the inner transport's
// connections (see CloseIdleConnections).
func (t *Transport) Close() error {
	return t.lb.Close()
}

// CloseIdleConnections closes the inner transport's idle connections, if it
// has that method (http.Client.CloseIdleConnections calls this).
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.inner.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// errSetChanging: the selects kept returning ids of sets replaced since.
var errSetChanging = errors.New("polylbhttp: the endpoint set changed under every select")

// RoundTrip sends req to an endpoint polylb picks and reports how it went
// (see Transport for when). Errors of the inner transport are returned as
// they are; a failed pick (no endpoint, a closed Transport) is returned
// wrapped, and req's body is closed, as RoundTrip must. With WithRetries, a
// request whose connection could not be made is sent again to an endpoint
// not tried yet; when none can be picked, the last attempt's error is
// returned.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.hosts != nil && !t.balances(req.URL) {
		return t.inner.RoundTrip(req) // not a balanced service (WithHosts)
	}
	var tried []uint64
	var lastErr error
	body := req.Body
	for {
		x := &exchange{ctx: req.Context(), cancel: req.Cancel}
		tgt, err := t.pick(req, x, tried)
		if err != nil {
			if body != nil {
				body.Close()
			}
			if lastErr != nil {
				// A retry that cannot be made (every endpoint tried, or the
				// set emptied or the Transport closed while this request was
				// in flight) leaves the request its own error.
				return nil, lastErr
			}
			return nil, err
		}
		resp, err := t.send(req, body, x, tgt)
		if err == nil || len(tried) >= t.retries || !neverSent(err) || over(x.ctx, x.cancel) {
			return resp, err
		}
		// The inner transport has closed the body it was given: another
		// attempt needs a new one, which only GetBody can make.
		next, replayErr := replay(req)
		if replayErr != nil {
			return nil, err // it cannot be sent again: the attempt's own error
		}
		body, tried, lastErr = next, append(tried, x.call.ID()), err
	}
}

// send is one attempt: req with body, to tgt, reported through x.
func (t *Transport) send(req *http.Request, body io.ReadCloser, x *exchange, tgt target) (*http.Response, error) {
	// A request whose context was over before it was sent (a deadline
	// inherited already spent) is refused by the inner transport unsent: no
	// verdict on the endpoint (docs/outcomes.md), whatever its error says.
	overBefore := over(x.ctx, x.cancel)
	var resp *http.Response
	var err error
	reported := false
	defer func() {
		// A panic of the inner transport or of the classifier (user code):
		// the call still ends, with no verdict, and the response no one will
		// get is closed; the panic goes on.
		if !reported {
			x.call.Finish(polylb.Cancelled)
			if resp != nil && resp.Body != nil {
				resp.Body.Close()
			}
		}
	}()
	resp, err = t.inner.RoundTrip(redirect(req, body, tgt))
	reported = err != nil
	if err != nil {
		if overBefore || malformed(req) {
			// Never sent (an inherited deadline spent, or a request net/http
			// refuses to write: an invalid method, header name or value):
			// nothing is known of the endpoint.
			x.call.Finish(polylb.Cancelled)
		} else {
			x.call.Finish(errorOutcome(x.ctx, x.cancel, err))
		}
		return nil, err
	}
	renameLocation(req, resp, tgt)
	outcome := t.classify(resp)
	reported = true
	// A 101's body is the upgraded connection, which callers type-assert to
	// io.ReadWriteCloser: it is not wrapped, and the exchange is over.
	if t.atHeaders || outcome != polylb.Success || noBody(req, resp) ||
		resp.StatusCode == http.StatusSwitchingProtocols {
		x.call.Finish(outcome)
		return resp, nil
	}
	x.body = resp.Body
	resp.Body = x
	return resp, nil
}

// pick selects an endpoint for req, other than those tried, into x.call and
// returns its target.
func (t *Transport) pick(req *http.Request, x *exchange, tried []uint64) (target, error) {
	method, err := t.method(req)
	if err != nil {
		return target{}, err
	}
	var key []byte
	if t.hashKey != nil {
		if key = t.hashKey(req); len(key) == 0 {
			binary.LittleEndian.PutUint64(x.key[:], rand.Uint64())
			key = x.key[:]
		}
	}
	for range 3 {
		if len(tried) == 0 {
			x.call, err = t.lb.Call(method, key)
		} else {
			x.call, err = t.lb.CallAmong(method, key, nil, tried)
		}
		if err != nil {
			return target{}, fmt.Errorf("polylbhttp: %w", err)
		}
		if tgt, ok := t.set.Load().byID[x.call.ID()]; ok {
			return tgt, nil
		}
		// Selected in a set that an Update has replaced since: no verdict,
		// select again in the new one.
		x.call.Finish(polylb.Cancelled)
	}
	return target{}, errSetChanging
}

// method is req's interned method (WithMethod), ServiceLevel by default.
func (t *Transport) method(req *http.Request) (polylb.Method, error) {
	if t.methodName == nil {
		return polylb.ServiceLevel, nil
	}
	name := t.methodName(req)
	t.methodsMu.RLock()
	m, ok := t.methods[name]
	t.methodsMu.RUnlock()
	if ok {
		return m, nil
	}
	m, err := t.lb.Method(name)
	if err != nil {
		return 0, fmt.Errorf("polylbhttp: method %q: %w", name, err)
	}
	t.methodsMu.Lock()
	t.methods[name] = m
	t.methodsMu.Unlock()
	return m, nil
}

// redirect is req sent to tgt with body. A RoundTripper must not modify its
// request, so the request and its URL are copied (shallowly: the headers are
// the caller's, as they would be without the balancer; the body is the
// caller's, or GetBody's for a retry).
func redirect(req *http.Request, body io.ReadCloser, tgt target) *http.Request {
	out := new(http.Request)
	*out = *req
	out.Body = body
	u := *req.URL
	u.Scheme, u.Host = tgt.scheme, tgt.host
	out.URL = &u
	// http.NewRequest sets Host to the URL's host, here the logical name:
	// the endpoint gets its own host:port instead. A Host the caller set to
	// something else is theirs to keep (a virtual host behind the endpoint).
	if req.Host == req.URL.Host {
		out.Host = ""
	}
	return out
}

// noBody tells a response that has no body to wait for. HTTP/1 gives such a
// response http.NoBody, but HTTP/2 gives its own empty body (to a HEAD, and
// to a response whose headers end the stream: a 204, a 304, a length of 0),
// which callers need not read nor, for a HEAD, close.
func noBody(req *http.Request, resp *http.Response) bool {
	return resp.Body == nil || resp.Body == http.NoBody || resp.ContentLength == 0 ||
		req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified
}

// renameLocation makes a redirect to the endpoint itself a redirect to the
// request's own scheme and host, as a reverse proxy renames its upstream's
// redirects. The endpoint saw its own name in Host, and servers build an
// absolute Location from it: left as it is, http.Client would take it for
// another host and drop the Authorization and Cookie headers (the next
// request is balanced again either way: every host is a name here).
func renameLocation(req *http.Request, resp *http.Response, tgt target) {
	if resp.StatusCode < 300 || resp.StatusCode > 399 {
		return
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return
	}
	u, err := url.Parse(loc)
	if err != nil || u.Scheme != tgt.scheme || !sameHost(u, tgt) {
		return
	}
	u.Scheme, u.Host = req.URL.Scheme, req.URL.Host
	resp.Header.Set("Location", u.String())
}

// sameHost tells whether u's host is tgt's, ignoring case, a port that is
// the scheme's default written or not ("http://10.0.0.1:80" and
// "http://10.0.0.1" are one origin, as polylb.httpx compares them).
func sameHost(u *url.URL, tgt target) bool {
	t := url.URL{Scheme: tgt.scheme, Host: tgt.host}
	return strings.EqualFold(u.Hostname(), t.Hostname()) && portOf(u) == portOf(&t)
}

// portOf is u's port, the scheme's default when it has none.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	return map[string]string{"http": "80", "https": "443"}[u.Scheme]
}

// malformed tells a request net/http refuses to send, as it checks before
// taking a connection: a method that is not a token, a header name that is
// not one, a header value with a control character other than a tab. Such
// a request could not be encoded: no verdict on the endpoint, as polylb.httpx
// reads h11's LocalProtocolError. Only asked after the inner transport failed.
func malformed(req *http.Request) bool {
	if req.Method != "" && !isToken(req.Method) {
		return true
	}
	for name, values := range req.Header {
		if !isToken(name) {
			return true
		}
		for _, v := range values {
			for i := 0; i < len(v); i++ {
				if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
					return true
				}
			}
		}
	}
	return false
}

// isToken tells an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// neverSent tells an error of a request that never reached its endpoint: its
// connection could not be made (refused, no route, a name that does not
// resolve). A dial that timed out is not one: the endpoint may be slow, and
// the time is spent.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && !op.Timeout()
}

// replay is a new body for another attempt of req: none for a request
// without one, else GetBody's (an error when req has none: it cannot be sent
// again).
func replay(req *http.Request) (io.ReadCloser, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req.Body, nil
	}
	if req.GetBody == nil {
		return nil, errors.New("polylbhttp: the request's body cannot be sent again (no GetBody)")
	}
	return req.GetBody()
}

// balances tells whether u is to one of the names of WithHosts: its host
// alone, or host:port with the scheme's default port when u has none (so
// "orders:80" names http://orders too).
func (t *Transport) balances(u *url.URL) bool {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return t.hosts[host] || t.hosts[net.JoinHostPort(host, port)]
}

// hashingStrategies place each request by its key (docs/strategies.md).
var hashingStrategies = map[string]bool{"consistenthash": true, "boundedhash": true, "maglev": true, "rendezvous": true}

// checkHashKey refuses a hashing strategy without WithHashKey: every request
// would hash the empty key and go to one endpoint (polylb-spring refuses it
// at startup too).
func (t *Transport) checkHashKey() error {
	if t.hashKey != nil {
		return nil
	}
	stats, err := t.lb.Stats()
	if err != nil {
		return fmt.Errorf("polylbhttp: %w", err)
	}
	if hashingStrategies[stats.Strategy] {
		return fmt.Errorf("polylbhttp: loadbalance=%s places each request by its key, but no WithHashKey "+
			"gives one (e.g. WithHashKey(HeaderKey(\"X-User-Id\"))): every request would go to one endpoint",
			stats.Strategy)
	}
	return nil
}
