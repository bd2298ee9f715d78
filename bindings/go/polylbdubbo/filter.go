package polylbdubbo

import (
	"context"

	clusterpkg "dubbo.apache.org/dubbo-go/v3/cluster/cluster"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/filter"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

// Filter is the consumer filter "polylb": it wraps each provider invoker, so
// every attempt (each failover retry) is timed and reported on its own. It
// claims the pick the LoadBalance made for this provider in Invoke and
// reports it in OnResponse with the call's latency and OutcomeOf(ctx, res).
// A call dubbo-go sends without asking the LoadBalance (a lone provider,
// sticky, forking to all) is counted too, as dubbo-go's RPCStatus counts
// every call, once polylb balances that service. Services not balanced by
// polylb pass through.
type Filter struct{}

// interceptor is the cluster interceptor "polylb": it marks each invocation
// while the cluster runs it and, when the cluster returns, releases the
// picks never sent (a reselect replaced them, an error came before the
// send, a forked call had not started).
type interceptor struct{}

func registerFilter() {
	f := &Filter{}
	extension.SetFilter(Name, func() filter.Filter { return f })
	// Cluster interceptors apply to every cluster invoker that dubbo-go's
	// clusters build (BuildInterceptorChain), whatever the reference
	// configures: the cost for other services is three attribute accesses
	// per invocation.
	clusterpkg.SetClusterInterceptor(Name, func() clusterpkg.Interceptor { return interceptor{} })
}

func (interceptor) Invoke(ctx context.Context, next base.Invoker, inv base.Invocation) result.Result {
	if endsAreSeen(inv) {
		return next.Invoke(ctx, inv) // a cluster inside a cluster: the outer one ends it
	}
	inv.SetAttribute(endsAttr, true)
	defer func() {
		// Unmarked first: a later select with this invocation (failback's
		// retry timer) has no end to wait for.
		inv.SetAttribute(endsAttr, false)
		if ps := picksOf(inv, false); ps != nil {
			ps.releaseUnsent()
		}
	}()
	return next.Invoke(ctx, inv)
}

// Invoke starts the call's accounting and sends it.
func (f *Filter) Invoke(ctx context.Context, invoker base.Invoker, inv base.Invocation) result.Result {
	p := begin(invoker, inv)
	if p == nil {
		return invoker.Invoke(ctx, inv)
	}
	returned := false
	defer func() {
		if !returned { // the invoker panicked: OnResponse will not run
			if ps := picksOf(inv, false); ps != nil && ps.finish(invoker.GetURL()) == p {
				p.report(failure)
			}
		}
	}()
	res := invoker.Invoke(ctx, inv)
	returned = true
	return res
}

// OnResponse reports the call. dubbo-go calls it right after Invoke returns
// (protocolwrapper.FilterInvoker), with the protocol's invoker, whose URL is
// the picked invoker's.
func (f *Filter) OnResponse(ctx context.Context, res result.Result, invoker base.Invoker, inv base.Invocation) result.Result {
	if ps := picksOf(inv, false); ps != nil {
		if p := ps.finish(invoker.GetURL()); p != nil {
			p.report(OutcomeOf(ctx, res))
		}
	}
	return res
}

// begin claims the invocation's pick for this provider, or counts a call
// sent without one; nil when polylb does not balance the service.
func begin(invoker base.Invoker, inv base.Invocation) *pick {
	u := invoker.GetURL()
	if ps := picksOf(inv, false); ps != nil {
		if p := ps.start(u); p != nil {
			return p
		}
	}
	method := inv.ActualMethodName()
	lb := byName[methodParam(u, method, constant.LoadbalanceKey, constant.DefaultLoadBalance)]
	if lb == nil {
		return nil
	}
	v, ok := lb.services.Load(u.ServiceKey())
	if !ok {
		return nil // polylb has not balanced this service yet: no set to count in
	}
	st := v.(*serviceState)
	s := st.set.Load()
	if s == nil {
		return nil
	}
	pos, ok := s.positionOfURL(u)
	if !ok {
		return nil
	}
	b, err := st.bindingFor(s, method, u, false)
	if err != nil {
		return nil // the LoadBalance reports configuration errors
	}
	// A select among this provider alone counts the call in flight.
	id, err := b.balancer.SelectAmong(b.method, nil, []uint64{s.ids[pos]}, nil)
	if err != nil {
		return nil // the set changed meanwhile: the call goes uncounted
	}
	p := &pick{st: st, balancer: b.balancer, method: b.method, id: id, url: u, key: s.keys[pos]}
	picksOf(inv, true).addStarted(p)
	return p
}
