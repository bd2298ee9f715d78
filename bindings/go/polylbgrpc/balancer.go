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
// strategies read their key from the RPC's context (WithKey).
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

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/grpclog"
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
		ClientConn: cc,
		opts:       b.opts,
		ids:        resolver.NewEndpointMap[uint64](),
	}
	p.child = endpointsharding.NewBalancer(p, opts, balancer.Get(pickfirst.Name).Build, endpointsharding.Options{})
	return p
}

// policy is one ClientConn's balancer. It embeds the ClientConn to see the
// states its endpointsharding child sends up.
type policy struct {
	balancer.ClientConn
	child balancer.Balancer
	opts  Options

	mu       sync.Mutex
	cfg      Config
	lb       *lbState // nil until the first config
	ids      *resolver.EndpointMap[uint64]
	nextID   uint64
	set      []polylb.Invoker // the set the library holds, in id order
	closed   bool
	children []endpointsharding.ChildState
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
	p.child.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
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
		p.set = set
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
