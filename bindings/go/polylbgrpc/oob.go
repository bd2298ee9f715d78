package polylbgrpc

import (
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/resolver"
)

// ORCA's out-of-band load reports ("enableOobLoadReport" in the entry, with
// "loadbalance=orca"): each READY connection of the policy's pick_first
// children carries an ORCA stream (orca.RegisterOOBListener) asking for a
// report every "oobReportingPeriod", and each report it brings goes to the
// endpoint's invoker through ReportLoad, read as a per-call report is; the
// calls' trailers then feed orca no more (picker.go), as in gRPC's
// weighted_round_robin.
//
// The policy sees the connections by standing as the ClientConn of its
// endpointsharding child: NewSubConn below wraps each SubConn's state
// listener. A SubConn belongs to the endpoint whose address it connects to
// (pick_first gives each SubConn one address of its endpoint).
//
// A period of 0 ("0s") asks for no interval, as in the Java policy, which then
// sends its request without report_interval. grpc-go's listener cannot leave
// the field out: orca.OOBListenerOptions{ReportInterval: 0} sends
// report_interval 0s (the producer writes durationpb.New(interval) whatever
// the interval; gRPC's weighted_round_robin passes its own period the same
// way). grpc-go's orca service reads an interval below its minimum as its
// minimum (logging a warning for it on each stream), so 0 is passed through
// as it is: the server's minimum applies. A server that took 0 literally
// would report as often as it could. TestOOBReportingPeriodDefaultAndZero
// shows the request and the first report.
//
// Locking: p.mu guards p.subConns and each entry. A listener's OnLoadReport
// runs on grpc's ORCA producer goroutine, holding the producer's lock, and
// touches nothing of the policy but p.current (atomic) and the balancer it
// reports to; stopping a listener waits for that lock, so it may be done
// under p.mu.

// oobSubConn is one SubConn the policy's children created.
type oobSubConn struct {
	id    uint64 // the endpoint's invoker id
	ready bool   // its last state was READY
	stop  func() // stops its OOB listener; nil when none runs
}

// oobListener hands a SubConn's out-of-band reports to the policy's balancer
// of the moment: a config change with the same out-of-band settings keeps
// the listeners (and their streams), which then report to the new balancer.
type oobListener struct {
	p  *policy
	id uint64
}

func (l *oobListener) OnLoadReport(r *v3orcapb.OrcaLoadReport) {
	st := l.p.current.Load()
	if st == nil || !st.oob {
		return // a report crossing a change to settings without the stream
	}
	// A report the library refuses (eps above qps, or an invoker a new
	// balancer does not hold yet) and one after the balancer was replaced or
	// closed have nowhere to go: dropped, as in the per-call path.
	_ = reportLoad(st.lb, l.id, r)
}

// configureOOBLocked sets the listeners' settings for a new balancer: on
// (out-of-band reports under orca) and the period. The same settings keep
// the listeners running; other settings stop them all, and syncListener
// starts the new ones once the new balancer holds its set (a stream's
// request is final: a new period needs a new stream). Called with p.mu held.
func (p *policy) configureOOBLocked(on bool, period time.Duration) {
	if on == p.oobOn && (!on || period == p.oobPeriod) {
		return
	}
	p.oobOn, p.oobPeriod = on, period
	for _, e := range p.subConns {
		if e.stop != nil {
			e.stop()
			e.stop = nil
		}
	}
}

// NewSubConn creates the SubConn for the child and follows its states, to
// run an OOB listener while it is READY and the settings want one (a later
// config may turn them on).
func (p *policy) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	if len(addrs) == 0 {
		return p.ClientConn.NewSubConn(addrs, opts)
	}
	p.mu.Lock()
	id, listed := p.addrIDs[addrs[0].Addr]
	p.mu.Unlock()
	if !listed { // no endpoint of the last resolver update has it: not followed
		return p.ClientConn.NewSubConn(addrs, opts)
	}
	var sc balancer.SubConn
	e := &oobSubConn{id: id}
	childListener := opts.StateListener
	// gRPC calls the listener on its serializer, never before NewSubConn
	// returns (which runs on the serializer too), so sc is set by then.
	opts.StateListener = func(s balancer.SubConnState) {
		p.subConnState(sc, e, s.ConnectivityState)
		if childListener != nil {
			childListener(s)
		}
	}
	sc, err := p.ClientConn.NewSubConn(addrs, opts)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if !p.closed {
		p.subConns[sc] = e
	}
	p.mu.Unlock()
	return sc, nil
}

// subConnState starts the SubConn's listener when it becomes READY, and stops
// it when it leaves READY (gRPC also ends the stream then: it closes a
// SubConn's producers on every state change) or is shut down.
func (p *policy) subConnState(sc balancer.SubConn, e *oobSubConn, s connectivity.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return // Close stopped every listener
	}
	e.ready = s == connectivity.Ready
	if s == connectivity.Shutdown {
		delete(p.subConns, sc)
	}
	p.syncListener(sc, e)
}

// syncListener makes the SubConn's listener run exactly when the SubConn is
// READY and the settings want listeners (out-of-band reports under orca). A
// new listener starts only once the balancer holds its set (p.set is nil
// from a new balancer's creation to its first set: the server sends a report
// as the stream opens, and the balancer would refuse it for an invoker it
// does not hold yet, leaving the endpoint without a weight until the next
// report); a running one is kept through a new balancer with the same
// settings. Called with p.mu held.
func (p *policy) syncListener(sc balancer.SubConn, e *oobSubConn) {
	want := e.ready && p.oobOn
	if e.stop != nil && !want {
		e.stop()
		e.stop = nil
	}
	if want && e.stop == nil && p.set != nil {
		e.stop = p.registerOOB(sc, &oobListener{p: p, id: e.id},
			orca.OOBListenerOptions{ReportInterval: p.oobPeriod})
	}
}

// syncListenersLocked runs syncListener over every SubConn, once a new
// balancer takes its set: it starts the listeners the settings want and
// configureOOBLocked stopped or none ran (new streams, so a first report at
// once). Called with p.mu held.
func (p *policy) syncListenersLocked() {
	for sc, e := range p.subConns {
		p.syncListener(sc, e)
	}
}

// stopListenersLocked stops every listener, for Close.
func (p *policy) stopListenersLocked() {
	for sc, e := range p.subConns {
		if e.stop != nil {
			e.stop()
			e.stop = nil
		}
		delete(p.subConns, sc)
	}
}
