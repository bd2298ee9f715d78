package polylbgrpc

import (
	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/resolver"
)

// ORCA's out-of-band load reports (Options.OOBLoadReportInterval): under
// orca, each READY connection of the policy's pick_first children carries an
// ORCA stream (orca.RegisterOOBListener), and each report it brings goes to
// the endpoint's invoker through ReportLoad, read as a per-call report is.
//
// The policy sees the connections by standing as the ClientConn of its
// endpointsharding child: NewSubConn below wraps each SubConn's state
// listener. A SubConn belongs to the endpoint whose address it connects to
// (pick_first gives each SubConn one address of its endpoint).
//
// Locking: p.mu guards p.subConns and each entry. A listener's OnLoadReport
// runs on grpc's ORCA producer goroutine, holding the producer's lock, and
// touches nothing of the policy but the balancer it reports to; stopping a
// listener waits for that goroutine, so it may be done under p.mu.

// oobSubConn is one SubConn the policy's children created.
type oobSubConn struct {
	id    uint64 // the endpoint's invoker id
	ready bool   // its last state was READY
	stop  func() // stops its OOB listener; nil when none runs
}

// oobListener hands a SubConn's out-of-band reports to the balancer it was
// registered for (a new balancer gets new listeners once it holds its set,
// and so new streams, whose first report the server sends at once).
type oobListener struct {
	lb *polylb.Balancer
	id uint64
}

func (l *oobListener) OnLoadReport(r *v3orcapb.OrcaLoadReport) {
	// A report the library refuses (eps above qps) is the server's mistake,
	// and one after the balancer was replaced or closed has nowhere to go:
	// both dropped, as in the per-call path.
	_ = reportLoad(l.lb, l.id, r)
}

// oobOn: the policy registers OOB listeners at all (the option set).
func (p *policy) oobOn() bool { return p.opts.OOBLoadReportInterval > 0 }

// NewSubConn creates the SubConn for the child and, with the option on,
// follows its states to run an OOB listener while it is READY.
func (p *policy) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	if !p.oobOn() || len(addrs) == 0 {
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
// READY and the balancer is orca's and holds its set (p.set is nil from a new
// balancer's creation to its first set: the server sends a report as the
// stream opens, and the balancer would refuse it for an invoker it does not
// hold yet, leaving the endpoint without a weight until the next report).
// Called with p.mu held.
func (p *policy) syncListener(sc balancer.SubConn, e *oobSubConn) {
	want := e.ready && p.lb != nil && p.lb.orca && p.set != nil
	if e.stop != nil && !want {
		e.stop()
		e.stop = nil
	}
	if want && e.stop == nil {
		e.stop = p.registerOOB(sc, &oobListener{lb: p.lb.lb, id: e.id},
			orca.OOBListenerOptions{ReportInterval: p.opts.OOBLoadReportInterval})
	}
}

// syncListenersLocked runs syncListener over every SubConn: with a new
// balancer (no set yet) it stops every listener, the old balancer's; once the
// balancer takes a set, it starts them for it (new streams, so a first report
// at once). Called with p.mu held.
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
