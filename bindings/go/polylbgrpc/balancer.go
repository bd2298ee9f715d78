// Package polylbgrpc makes polylb a load-balancing policy of grpc-go: every
// RPC of a ClientConn is placed by a polylb balancer (any strategy: Dubbo's
// six and polylb's own), and every RPC's end is reported to it with its
// latency and an outcome read from its status, so leastactive, p2c, peakewma,
// shortestresponse and outlier ejection see what the calls do.
//
// Importing the package registers the policy under the name "polylb"; a
// ClientConn selects it through its service config, with polylb's config
// string:
//
//	grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":
//	    [{"polylb": {"config": "loadbalance=peakewma"}}]}`)
//
// Each endpoint the resolver gives is one invoker, connected by a pick_first
// child (gRPC's own pattern for endpoint-level policies); every listed
// endpoint is in the balancer's set, and RPCs go to those whose connection is
// READY. An endpoint keeps its invoker id while the resolver lists it, so its
// state (round robin's running weight, latency estimates, calls in flight)
// survives a reconnect. Weights come from gRPC's
// experimental weight attribute (weight.Set; xDS sets it) or, with warm-up and
// zone, from SetInvoker. Per-method state is keyed by the RPC's full method
// name ("/pkg.Service/Method"), as Dubbo keys it by method. The hash
// strategies read their key from the RPC's context (WithKey). Server load
// comes from ORCA reports: each call's, or, for orca with
// "enableOobLoadReport": true in the entry, the out-of-band stream's (oob.go).
//
// The package is thin: it maps gRPC's endpoints, picks and statuses onto the
// polylb Go binding, and every balancing decision is the library's.
package polylbgrpc

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// Name is the policy's name in a service config's loadBalancingConfig.
const Name = "polylb"

var logger = grpclog.Component("polylb")

func init() {
	balancer.Register(NewBuilder(Name, Options{}))
}

// Config is the policy's service-config entry.
type Config struct {
	serviceconfig.LoadBalancingConfig `json:"-"`

	// Config is polylb's own config string, e.g. "loadbalance=p2c" or
	// "loadbalance=consistenthash&hash.nodes=320" (docs/strategies.md). Empty
	// is the library's default strategy (Dubbo's: random).
	Config string `json:"config"`
	// ServiceLevel keeps one state for all the ClientConn's methods instead
	// of one per method (one in-flight count per endpoint, say).
	ServiceLevel bool `json:"serviceLevel,omitempty"`
	// EnableOOBLoadReport, with "loadbalance=orca", reads the endpoints' load
	// from ORCA's out-of-band stream instead of the calls' trailers, as
	// gRPC's weighted_round_robin does with its enableOobLoadReport (oob.go);
	// the other strategies ignore it.
	EnableOOBLoadReport bool `json:"enableOobLoadReport,omitempty"`
	// OOBReportingPeriod is the report interval the out-of-band stream asks
	// the server for: JSON "oobReportingPeriod", a duration as gRPC's service
	// configs write them ("10s", "0.5s"), DefaultOOBReportingPeriod when
	// absent. Zero asks for none: the server's own minimum.
	OOBReportingPeriod time.Duration `json:"-"`
}

// DefaultOOBReportingPeriod is the entry's "oobReportingPeriod" when absent,
// gRFC A58's default.
const DefaultOOBReportingPeriod = 10 * time.Second

// Options are a builder's own settings, for NewBuilder.
type Options struct {
	// Observe, when set, is called with each polylb balancer the policy
	// creates, e.g. to read its Stats for metrics: one when the ClientConn
	// connects, a new one when its entry (any key) changes, and a new one each
	// time it leaves idle mode (gRPC closes the policy of an idle ClientConn,
	// after grpc.WithIdleTimeout, 30 minutes by default, and builds another
	// on the next RPC). Keep the latest; the earlier ones are closed. The
	// balancer is the policy's: do not Update or Close it.
	Observe func(*polylb.Balancer)
}

// NewBuilder returns a builder of the policy under another name, with
// options; register it with balancer.Register before dialling. The "polylb"
// builder registered by this package has no options.
func NewBuilder(name string, opts Options) balancer.Builder {
	return builder{name: name, opts: opts}
}

type builder struct {
	name string
	opts Options
	// registerOOB is orca.RegisterOOBListener; tests wrap it to count the
	// listeners registered and stopped.
	registerOOB func(balancer.SubConn, orca.OOBListener, orca.OOBListenerOptions) (stop func())
}

func (b builder) Name() string { return b.name }

// ParseConfig checks the entry: its keys as spelt, their types, the
// out-of-band period's form, and the config string by building a balancer
// from it, so a bad string is the service config's error, naming the key
// (and a likely fix), before any RPC.
func (b builder) ParseConfig(raw json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	fields, err := checkKeys(raw)
	if err != nil {
		return nil, err
	}
	// encoding/json would hand over U+FFFD for what is not text, which the
	// library (and the Java policy) refuse: here a subset.key of U+FFFD
	// would pass.
	if v, ok := fields["config"]; ok && lossyText(v) {
		return nil, fmt.Errorf(`polylb: bad loadBalancingConfig: "config" is not valid UTF-8 (bytes that are not, or a \u escape of half a surrogate pair)`)
	}
	cfg := &Config{OOBReportingPeriod: DefaultOOBReportingPeriod}
	if err := json.Unmarshal(raw, cfg); err != nil {
		return nil, fmt.Errorf("polylb: bad loadBalancingConfig %s: %w", excerpt(raw), err)
	}
	if v, ok := fields["oobReportingPeriod"]; ok {
		period, err := parseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("polylb: bad loadBalancingConfig %s: %w", excerpt(raw), err)
		}
		cfg.OOBReportingPeriod = period
	}
	lb, err := polylb.New(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", quoted(cfg.Config), err)
	}
	lb.Close()
	return cfg, nil
}

// durationForm is a google.protobuf.Duration as JSON writes it, the form of
// gRPC's durations in service configs ("10s", "0.050s"): whole seconds (up
// to 9 digits) and up to 9 decimals, never negative here.
var durationForm = regexp.MustCompile(`^([0-9]{1,9})(?:\.([0-9]{1,9}))?s$`)

// parseDuration reads "oobReportingPeriod" as the Java policy does.
func parseDuration(v json.RawMessage) (time.Duration, error) {
	var text string
	if string(v) == "null" || json.Unmarshal(v, &text) != nil {
		return 0, fmt.Errorf(`"oobReportingPeriod" is %s, want a duration such as "10s" or "0.5s"`, excerpt(v))
	}
	m := durationForm.FindStringSubmatch(text)
	if m == nil {
		return 0, fmt.Errorf(`"oobReportingPeriod" is %s, want a duration such as "10s" or "0.5s" (seconds, up to 9 decimals, not negative)`, quoted(text))
	}
	seconds, _ := strconv.ParseInt(m[1], 10, 64)
	var nanos int64
	if m[2] != "" {
		nanos, _ = strconv.ParseInt((m[2] + "00000000")[:9], 10, 64)
	}
	return time.Duration(seconds)*time.Second + time.Duration(nanos), nil
}

// entryKeys are the entry's keys as spelt. encoding/json alone would match a
// key in any case and skip an unknown one, so {"confg": ...} would silently
// mean the default strategy, and {"Config": ...} would work here but not in
// the Java policy, which reads the exact key.
var entryKeys = []string{"config", "serviceLevel", "enableOobLoadReport", "oobReportingPeriod"}

// checkKeys returns the entry's fields, or an error for a key not in
// entryKeys.
func checkKeys(raw json.RawMessage) (map[string]json.RawMessage, error) {
	// encoding/json reads null as {} and keeps the last of a repeated key;
	// grpc-java refuses the one ("is not object") and its JSON parser the
	// other, so either would work here and fail the same service config in
	// Java.
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, fmt.Errorf("polylb: bad loadBalancingConfig null: the entry is null (give it an object, {} for the defaults)")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("polylb: bad loadBalancingConfig %s: %w", excerpt(raw), err)
	}
	if key, ok := repeatedKey(raw); ok {
		return nil, fmt.Errorf("polylb: bad loadBalancingConfig %s: %s is given twice", excerpt(raw), quoted(key))
	}
	keys := make([]string, 0, len(fields))
	for key := range fields {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if slices.Contains(entryKeys, key) {
			continue
		}
		return nil, fmt.Errorf("polylb: unknown key %s in loadBalancingConfig %s (its keys are %q, %q, %q and %q, as spelt)",
			quoted(key), excerpt(raw), entryKeys[0], entryKeys[1], entryKeys[2], entryKeys[3])
	}
	// encoding/json leaves a field at its default for null; the Java policy
	// refuses null for every key, as a value of another type.
	for _, key := range keys {
		if string(fields[key]) == "null" {
			return nil, fmt.Errorf("polylb: bad loadBalancingConfig %s: %q is null (give it a value, or leave the key out)", excerpt(raw), key)
		}
	}
	return fields, nil
}

// repeatedKey returns a key that raw, a JSON object, gives twice (as
// decoded: "\u0063onfig" is "config", as in Java).
func repeatedKey(raw json.RawMessage) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // '{'
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		key, _ := tok.(string)
		if seen[key] {
			return key, true
		}
		seen[key] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return "", false
		}
	}
	return "", false
}

// lossyText reports whether v, a JSON value as written, holds bytes that are
// not UTF-8 or a \u escape of a surrogate without its pair.
func lossyText(v json.RawMessage) bool {
	if !utf8.Valid(v) {
		return true
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		i++ // the escaped character; a \u has 4 hex digits (v is valid JSON)
		if v[i] != 'u' {
			continue
		}
		r := escapedRune(v[i+1:])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		if r >= 0xDC00 || !bytes.HasPrefix(v[i+1:], []byte(`\u`)) {
			return true
		}
		if utf16.DecodeRune(r, escapedRune(v[i+3:])) == utf8.RuneError {
			return true
		}
		i += 6
	}
	return false
}

// escapedRune reads the 4 hex digits that start b.
func escapedRune(b []byte) rune {
	n, _ := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(n)
}

func (b builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	p := &policy{
		ClientConn:  cc,
		opts:        b.opts,
		registerOOB: b.registerOOB,
		ids:         resolver.NewEndpointMap[uint64](),
		addrIDs:     map[string]uint64{},
		listed:      map[uint64]resolver.Endpoint{},
		subConns:    map[balancer.SubConn]*oobSubConn{},
		ready:       map[uint64]bool{},
	}
	if p.registerOOB == nil {
		p.registerOOB = orca.RegisterOOBListener
	}
	p.child = endpointsharding.NewBalancer(p, opts, balancer.Get(pickfirst.Name).Build, endpointsharding.Options{})
	return p
}

// policy is one ClientConn's balancer. It embeds the ClientConn to see the
// states its endpointsharding child sends up (and the SubConns its children
// create, for OOB load reports: oob.go).
type policy struct {
	balancer.ClientConn
	child       balancer.Balancer
	opts        Options
	registerOOB func(balancer.SubConn, orca.OOBListener, orca.OOBListenerOptions) func()
	// current is lb, for the OOB listeners' reports (read without p.mu).
	current atomic.Pointer[lbState]

	mu     sync.Mutex
	cfg    Config
	lb     *lbState // nil until the first config
	ids    *resolver.EndpointMap[uint64]
	nextID uint64
	// listed: each id's endpoint as the resolver first lists it, for its
	// invoker fields. endpointsharding keeps one of an endpoint's duplicates
	// at random (it rotates the list first), so the child's copy of one
	// listed twice with different weights would change the weight between
	// identical updates.
	listed map[uint64]resolver.Endpoint
	set    []polylb.Invoker // the set the library holds, in id order
	// lastRejected: the last set the library rejected (logged once), and
	// rejected its error since the last resolver update, for its answer.
	lastRejected []polylb.Invoker
	rejected     error
	closed       bool
	children     []endpointsharding.ChildState
	// addrIDs: each listed endpoint's addresses → its invoker id, for the
	// SubConns the children create.
	addrIDs  map[string]uint64
	subConns map[balancer.SubConn]*oobSubConn // the children's SubConns
	// oobOn and oobPeriod: the listeners' settings (oob.go).
	oobOn     bool
	oobPeriod time.Duration
	// ready: each listed id whose endpoint has been READY → whether it is
	// READY now, to tell a reconnect (READY again after another state) from
	// a first connection.
	ready map[uint64]bool
}

func (p *policy) UpdateClientConnState(ccs balancer.ClientConnState) error {
	cfg, ok := ccs.BalancerConfig.(*Config)
	if !ok {
		return fmt.Errorf("polylb: config of type %T, want *polylbgrpc.Config: %w", ccs.BalancerConfig, balancer.ErrBadResolverState)
	}
	p.mu.Lock()
	// Ids live while the resolver lists the endpoint, not while it is
	// connected: a reconnect keeps the invoker's state.
	listed := resolver.NewEndpointMap[bool]()
	for _, ep := range ccs.ResolverState.Endpoints {
		listed.Set(ep, true)
		if _, ok := p.ids.Get(ep); !ok {
			p.nextID++
			p.ids.Set(ep, p.nextID)
		}
	}
	for _, ep := range p.ids.Keys() {
		if _, ok := listed.Get(ep); !ok {
			id, _ := p.ids.Get(ep)
			delete(p.ready, id)
			p.ids.Delete(ep)
		}
	}
	// For the SubConns the children create (oob.go); an address listed in
	// two endpoints goes to the later one.
	clear(p.addrIDs)
	clear(p.listed)
	for _, ep := range ccs.ResolverState.Endpoints {
		id, _ := p.ids.Get(ep)
		if _, ok := p.listed[id]; !ok {
			p.listed[id] = ep
		}
		for _, a := range ep.Addresses {
			p.addrIDs[a.Addr] = id
		}
	}
	var keptConfig error
	if p.lb == nil || *cfg != p.cfg {
		if err := p.configureLocked(cfg, ccs.ResolverState.Endpoints); err != nil {
			if p.lb == nil {
				p.mu.Unlock()
				// No balancer to pick with (a Config built by hand skips
				// ParseConfig): RPCs fail with the reason, as for a first set
				// the library rejects, instead of waiting out their deadlines.
				p.ClientConn.UpdateState(balancer.State{
					ConnectivityState: connectivity.TransientFailure,
					Picker:            base.NewErrPicker(fmt.Errorf("polylb: %w", err)),
				})
				return err
			}
			keptConfig = err
		}
	}
	p.rejected = nil
	p.mu.Unlock()

	// The child sends its states up through UpdateState, inline.
	err := p.child.UpdateClientConnState(balancer.ClientConnState{
		ResolverState: pickfirst.EnableHealthListener(ccs.ResolverState),
	})
	p.mu.Lock()
	rejected := p.rejected
	p.mu.Unlock()
	if err == nil && keptConfig == nil && rejected != nil {
		// gRPC resolves again, with backoff: a resolver that lists fewer
		// endpoints later brings the set in.
		err = fmt.Errorf("%w: %v", balancer.ErrBadResolverState, rejected)
	}
	if err == nil && keptConfig != nil {
		err = fmt.Errorf("%w: %v", balancer.ErrBadResolverState, keptConfig)
	}
	return err
}

// configureLocked moves to a balancer of cfg, unless there is one already and
// the new one rejects the listed endpoints (e.g. more than maglev.tableSize):
// the channel then goes on with the one it has, and the rejection is
// returned. Called with p.mu held.
func (p *policy) configureLocked(cfg *Config, endpoints []resolver.Endpoint) error {
	// Any change of the entry, as in the Java policy: a new balancer
	// (whether the calls' trailers feed orca is the balancer's).
	lb, err := polylb.New(cfg.Config)
	if err != nil { // ParseConfig checked it, unless the Config was built by hand
		return fmt.Errorf("config %s: %w", quoted(cfg.Config), err)
	}
	if p.lb != nil {
		if err := lb.Update(p.listedSetLocked(endpoints)); err != nil {
			lb.Close()
			logger.Warningf("polylb: config %s rejected the %d listed endpoints, config %s kept: %v",
				quoted(cfg.Config), len(endpoints), quoted(p.cfg.Config), err)
			return fmt.Errorf("config %s: %w", quoted(cfg.Config), err)
		}
	}
	old := p.lb
	p.lb = newLBState(lb, cfg.ServiceLevel)
	// Out-of-band reports under orca only; their trailers then feed it
	// no more (the picker reads the flag).
	p.lb.oob = cfg.EnableOOBLoadReport && p.lb.orca
	p.current.Store(p.lb)
	p.cfg = *cfg
	p.set = nil // the set is taken (again) from the child's first state
	if old != nil {
		// Calls picked by the old balancer report to it after this:
		// Report on a closed balancer is an error they ignore.
		old.lb.Close()
	}
	if p.opts.Observe != nil {
		p.opts.Observe(lb)
	}
	// The same out-of-band settings keep the listeners, which report to
	// the new balancer; others stop them (new ones start once the
	// balancer holds its set).
	p.configureOOBLocked(p.lb.oob, cfg.OOBReportingPeriod)
	return nil
}

// listedSetLocked is the set of the listed endpoints, one invoker per id, in
// id order, as UpdateState builds it from the children.
func (p *policy) listedSetLocked(endpoints []resolver.Endpoint) []polylb.Invoker {
	set := make([]polylb.Invoker, 0, len(endpoints))
	seen := make(map[uint64]bool, len(endpoints))
	for _, ep := range endpoints {
		if id, ok := p.ids.Get(ep); ok && !seen[id] {
			seen[id] = true
			set = append(set, invokerOf(id, p.listed[id]))
		}
	}
	slices.SortFunc(set, func(a, b polylb.Invoker) int { return cmp.Compare(a.ID, b.ID) })
	return set
}

func (p *policy) ResolverError(err error) { p.child.ResolverError(err) }

func (p *policy) UpdateSubConnState(sc balancer.SubConn, state balancer.SubConnState) {
	logger.Errorf("polylb: UpdateSubConnState(%v, %+v) called unexpectedly", sc, state)
}

func (p *policy) ExitIdle() { p.child.ExitIdle() }

func (p *policy) Close() {
	p.mu.Lock()
	// Before the child's Close: the listeners' streams end with the policy,
	// not with their connections' teardown.
	p.stopListenersLocked()
	p.closed = true
	p.mu.Unlock()
	p.child.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lb != nil {
		p.lb.lb.Close()
	}
}

// UpdateState receives the endpointsharding child's state. The library's set
// is every listed endpoint, connected or not: an endpoint whose connection
// drops (a GOAWAY, a network blip) and comes back is the same invoker, and
// leaving the set would drop its state, among it the calls still in flight
// on the old connection. The picker excludes the endpoints not READY.
//
// An endpoint READY again after another state is reported to the library as
// a reconnect (ReportReconnect): orca then restarts its run of load reports,
// its weight no longer counting until a new blackout has passed since its
// next report, as gRPC's weighted_round_robin resets an endpoint's weight
// when its subchannel becomes READY (gRFC A58): the server behind the new
// connection may be a restarted, cold process. An endpoint's first READY is
// not reported (there is nothing to restart: its reports come over the
// connection). The other strategies ignore it.
func (p *policy) UpdateState(state balancer.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.lb == nil {
		return
	}
	children := endpointsharding.ChildStatesFromPicker(state.Picker)
	set := make([]polylb.Invoker, 0, len(children))
	pickers := make(map[uint64]balancer.Picker, len(children))
	var notReady []uint64
	for _, child := range children {
		id, ok := p.ids.Get(child.Endpoint)
		if !ok { // not listed by the last resolver update: leaving
			continue
		}
		listed, ok := p.listed[id]
		if !ok { // both come from the same resolver update: a guard
			listed = child.Endpoint
		}
		set = append(set, invokerOf(id, listed))
		if child.State.ConnectivityState == connectivity.Ready {
			pickers[id] = child.State.Picker
			if wasReady, seen := p.ready[id]; seen && !wasReady {
				// Before the picker that sends calls over the new
				// connection, so their reports start the new run. An error
				// (a balancer closed under a config change) has nothing to
				// restart.
				_ = p.lb.lb.ReportReconnect(id)
			}
			p.ready[id] = true
		} else {
			notReady = append(notReady, id)
			if _, seen := p.ready[id]; seen {
				p.ready[id] = false
			}
		}
	}
	slices.SortFunc(set, func(a, b polylb.Invoker) int { return cmp.Compare(a.ID, b.ID) })
	if !sameSet(set, p.set) {
		if err := p.lb.lb.Update(set); err != nil {
			p.keepSetLocked(set, err, children, pickers)
			return
		}
		first := p.set == nil
		p.set = set
		p.lastRejected = nil
		if first {
			p.syncListenersLocked() // a new balancer's OOB listeners
		}
	}
	if len(pickers) == 0 {
		// Nothing to balance over: the child's own picker queues the RPCs
		// (CONNECTING) or fails them (TRANSIENT_FAILURE) as gRPC does.
		p.ClientConn.UpdateState(state)
		return
	}
	p.sendPickerLocked(pickers, notReady)
}

// keepSetLocked answers a set the library rejected (it keeps the previous
// one: a rejected update changes nothing). With a set kept, the picker goes
// on over it, following its endpoints' states; with none (a new balancer's
// first, or an empty one), the channel fails with the library's reason rather
// than leave RPCs waiting for a picker that never comes. The pickers' errors
// are not gRPC statuses: gRPC ends an RPC at a status error from a picker
// even if it waits for ready (a drop, never retried), where for another error
// it fails a fail-fast RPC as UNAVAILABLE and lets a wait-for-ready one wait
// for the next picker.
func (p *policy) keepSetLocked(set []polylb.Invoker, err error, children []endpointsharding.ChildState,
	pickers map[uint64]balancer.Picker) {
	p.rejected = err
	if !sameSet(set, p.lastRejected) {
		p.lastRejected = set
		logger.Warningf("polylb: update of %d endpoints rejected, previous set of %d kept: %v", len(set), len(p.set), err)
	}
	if len(p.set) == 0 {
		p.ClientConn.UpdateState(balancer.State{
			ConnectivityState: connectivity.TransientFailure,
			Picker:            base.NewErrPicker(fmt.Errorf("polylb: the library rejected the endpoints: %w", err)),
		})
		return
	}
	inSet := make(map[uint64]bool, len(p.set))
	for _, inv := range p.set {
		inSet[inv.ID] = true
	}
	for id := range pickers {
		if !inSet[id] {
			delete(pickers, id)
		}
	}
	// Every other id of the kept set is excluded: those of endpoints not READY,
	// and those of endpoints the resolver dropped in the refused update (gone
	// from gRPC, still in the library: a pick of one returned
	// ErrNoSubConnAvailable, waiting for a picker that never came).
	var notReady []uint64
	for _, inv := range p.set {
		if _, ready := pickers[inv.ID]; !ready {
			notReady = append(notReady, inv.ID)
		}
	}
	if len(pickers) > 0 {
		p.sendPickerLocked(pickers, notReady)
		return
	}
	// None of the kept set READY: wait while one connects, fail once all failed.
	var failure error
	for _, child := range children {
		if id, ok := p.ids.Get(child.Endpoint); !ok || !inSet[id] {
			continue
		}
		if child.State.ConnectivityState != connectivity.TransientFailure {
			p.ClientConn.UpdateState(balancer.State{
				ConnectivityState: connectivity.Connecting,
				Picker:            base.NewErrPicker(balancer.ErrNoSubConnAvailable),
			})
			return
		}
		_, failure = child.State.Picker.Pick(balancer.PickInfo{})
	}
	p.ClientConn.UpdateState(balancer.State{
		ConnectivityState: connectivity.TransientFailure,
		Picker:            base.NewErrPicker(fmt.Errorf("polylb: no endpoint is reachable: %w", failure)),
	})
}

// sendPickerLocked sends up a picker over the READY endpoints.
func (p *policy) sendPickerLocked(pickers map[uint64]balancer.Picker, notReady []uint64) {
	p.ClientConn.UpdateState(balancer.State{
		ConnectivityState: connectivity.Ready,
		Picker:            &picker{lb: p.lb, pickers: pickers, notReady: notReady},
	})
}

// sameSet: an update with the same invokers is skipped (gRPC sends a state
// for every connectivity change of every endpoint, READY or not).
func sameSet(a, b []polylb.Invoker) bool { return slices.Equal(a, b) }
