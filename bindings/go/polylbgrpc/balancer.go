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
// comes from ORCA reports: each call's, and with
// Options.OOBLoadReportInterval the out-of-band stream's, for orca.
//
// The package is thin: it maps gRPC's endpoints, picks and statuses onto the
// polylb Go binding, and every balancing decision is the library's.
package polylbgrpc

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc/balancer"
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
}

// Options are a builder's own settings, for NewBuilder.
type Options struct {
	// Observe, when set, is called with each polylb balancer the policy
	// creates, e.g. to read its Stats for metrics: one when the ClientConn
	// connects, a new one when its config string changes, and a new one each
	// time it leaves idle mode (gRPC closes the policy of an idle ClientConn,
	// after grpc.WithIdleTimeout, 30 minutes by default, and builds another
	// on the next RPC). Keep the latest; the earlier ones are closed. The
	// balancer is the policy's: do not Update or Close it.
	Observe func(*polylb.Balancer)

	// OOBLoadReportInterval, when positive, has the orca strategy read ORCA's
	// out-of-band load reports, as gRPC's weighted_round_robin does with
	// enableOobLoadReport: each READY connection opens the server's ORCA
	// stream (orca.RegisterOOBListener), asking for a report every interval,
	// and each report goes to the endpoint's invoker through ReportLoad, read
	// as a call's report is (rps_fractional as qps, eps, and
	// application_utilization, or cpu_utilization when it is unset). The
	// server sends a report as the stream opens, then at this interval or
	// its own minimum (orca.ServiceOptions.MinReportingInterval; 30 s unless
	// it allows less), whichever is longer. The stream stops when its
	// connection leaves READY or its endpoint leaves the resolver's list,
	// under a config whose strategy is not orca, and when the policy closes.
	// Zero (the default) or negative: no stream; other strategies open none
	// either. Per-call reports are read as before, with or without it.
	OOBLoadReportInterval time.Duration
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

// ParseConfig checks the config string by building a balancer from it, so a
// bad string is the service config's error, naming the key (and a likely
// fix), before any RPC.
func (b builder) ParseConfig(raw json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	if err := checkKeys(raw); err != nil {
		return nil, err
	}
	cfg := &Config{}
	if err := json.Unmarshal(raw, cfg); err != nil {
		return nil, fmt.Errorf("polylb: bad loadBalancingConfig %s: %w", raw, err)
	}
	lb, err := polylb.New(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("config %q: %w", cfg.Config, err)
	}
	lb.Close()
	return cfg, nil
}

// entryKeys are the entry's keys as spelt. encoding/json alone would match a
// key in any case and skip an unknown one, so {"confg": ...} would silently
// mean the default strategy, and {"Config": ...} would work here but not in
// the Java policy, which reads the exact key.
var entryKeys = []string{"config", "serviceLevel"}

func checkKeys(raw json.RawMessage) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return fmt.Errorf("polylb: bad loadBalancingConfig %s: %w", raw, err)
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
		return fmt.Errorf("polylb: unknown key %q in loadBalancingConfig %s (its keys are %q and %q, as spelt)",
			key, raw, entryKeys[0], entryKeys[1])
	}
	return nil
}

func (b builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	p := &policy{
		ClientConn:  cc,
		opts:        b.opts,
		registerOOB: b.registerOOB,
		ids:         resolver.NewEndpointMap[uint64](),
		addrIDs:     map[string]uint64{},
		subConns:    map[balancer.SubConn]*oobSubConn{},
	}
	if p.registerOOB == nil {
		p.registerOOB = orca.RegisterOOBListener
	}
	p.child = endpointsharding.NewBalancer(p, opts, balancer.Get(pickfirst.Name).Build, endpointsharding.Options{})
	return p
}

// policy is one ClientConn's balancer. It embeds the ClientConn to see the
// states its endpointsharding child sends up (and, with OOB load reports on,
// the SubConns its children create: oob.go).
type policy struct {
	balancer.ClientConn
	child       balancer.Balancer
	opts        Options
	registerOOB func(balancer.SubConn, orca.OOBListener, orca.OOBListenerOptions) func()

	mu       sync.Mutex
	cfg      Config
	lb       *lbState // nil until the first config
	ids      *resolver.EndpointMap[uint64]
	nextID   uint64
	set      []polylb.Invoker // the set the library holds, in id order
	closed   bool
	children []endpointsharding.ChildState
	// addrIDs: each listed endpoint's addresses → its invoker id, for the
	// SubConns the children create (OOB load reports only).
	addrIDs  map[string]uint64
	subConns map[balancer.SubConn]*oobSubConn // the children's SubConns (OOB load reports only)
}

func (p *policy) UpdateClientConnState(ccs balancer.ClientConnState) error {
	cfg, ok := ccs.BalancerConfig.(*Config)
	if !ok {
		return fmt.Errorf("polylb: config of type %T, want *polylbgrpc.Config: %w", ccs.BalancerConfig, balancer.ErrBadResolverState)
	}
	p.mu.Lock()
	if p.lb == nil || cfg.Config != p.cfg.Config || cfg.ServiceLevel != p.cfg.ServiceLevel {
		lb, err := polylb.New(cfg.Config)
		if err != nil { // ParseConfig checked it; kept as a guard
			p.mu.Unlock()
			return fmt.Errorf("config %q: %w", cfg.Config, err)
		}
		old := p.lb
		p.lb = newLBState(lb, cfg.ServiceLevel)
		p.cfg = *cfg
		p.set = nil // the new balancer holds no set yet
		if old != nil {
			// Calls picked by the old balancer report to it after this:
			// Report on a closed balancer is an error they ignore.
			old.lb.Close()
		}
		if p.opts.Observe != nil {
			p.opts.Observe(lb)
		}
		p.syncListenersLocked() // stops the old balancer's OOB listeners
	}
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
			p.ids.Delete(ep)
		}
	}
	if p.oobOn() {
		// An address listed in two endpoints goes to the later one.
		clear(p.addrIDs)
		for _, ep := range ccs.ResolverState.Endpoints {
			id, _ := p.ids.Get(ep)
			for _, a := range ep.Addresses {
				p.addrIDs[a.Addr] = id
			}
		}
	}
	p.mu.Unlock()

	// The child sends its states up through UpdateState, inline.
	return p.child.UpdateClientConnState(balancer.ClientConnState{
		ResolverState: pickfirst.EnableHealthListener(ccs.ResolverState),
	})
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
		set = append(set, invokerOf(id, child.Endpoint))
		if child.State.ConnectivityState == connectivity.Ready {
			pickers[id] = child.State.Picker
		} else {
			notReady = append(notReady, id)
		}
	}
	slices.SortFunc(set, func(a, b polylb.Invoker) int { return cmp.Compare(a.ID, b.ID) })
	if !sameSet(set, p.set) {
		if err := p.lb.lb.Update(set); err != nil {
			// The library keeps the previous set (a rejected update changes
			// nothing), so the picker stays the one over that set.
			logger.Errorf("polylb: update of %d endpoints rejected, previous set kept: %v", len(set), err)
			return
		}
		first := p.set == nil
		p.set = set
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
	p.ClientConn.UpdateState(balancer.State{
		ConnectivityState: connectivity.Ready,
		Picker:            &picker{lb: p.lb, pickers: pickers, notReady: notReady},
	})
}

// sameSet: an update with the same invokers is skipped (gRPC sends a state
// for every connectivity change of every endpoint, READY or not).
func sameSet(a, b []polylb.Invoker) bool { return slices.Equal(a, b) }
