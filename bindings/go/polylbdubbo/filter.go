package polylbdubbo

import (
	"context"
	"errors"
	"strconv"

	clusterpkg "dubbo.apache.org/dubbo-go/v3/cluster/cluster"
	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/filter"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
	tri "dubbo.apache.org/dubbo-go/v3/protocol/triple/triple_protocol"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Filter is the consumer filter "polylb": it wraps each provider invoker, so
// every attempt (each failover retry) is timed and reported on its own. Its
// Invoke claims the pick the LoadBalance made for this provider and reports
// it when the call returns, with the call's latency and OutcomeOf(ctx, res).
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

// Invoke sends the call and reports it with its latency and
// OutcomeOf(ctx, res), or as a Failure if the invoker panics.
//
// The report is made here, with the pick in hand, not in OnResponse: there
// the pick would have to be found again by the invoker's URL, and dubbo-go
// drops an invoker's URL when it destroys it (a provider leaving the
// registry while the call runs), which made the lookup panic and take the
// consumer's process down. dubbo-go's FilterInvoker calls OnResponse right
// after Invoke with the same result, so the outcome is the same.
func (f *Filter) Invoke(ctx context.Context, invoker base.Invoker, inv base.Invocation) result.Result {
	ps, p := begin(invoker, inv)
	if p == nil {
		return invoker.Invoke(ctx, inv)
	}
	outcome := failure // stays so if the invoker panics
	defer func() {
		if ps.finish(p) {
			p.report(outcome)
		}
	}()
	// A failover retry after the caller's deadline (or cancel): Triple fails
	// it at once with the context's error, unsent, which says nothing of this
	// provider (docs/outcomes.md: a call never sent). The dubbo protocol
	// ignores the context and sends it: its answer, or its failure, is the
	// provider's and is classified as any other.
	spent := ctx != nil && ctx.Err() != nil
	res := invoker.Invoke(ctx, inv)
	outcome = OutcomeOf(ctx, res)
	if spent && res != nil && isContextError(res.Error()) {
		outcome = polylb.Cancelled
	}
	if outcome == polylb.Success && answersLater(p.url, inv) {
		// The invoker returned before the provider answered: its latency
		// would be a fast answer that never came.
		outcome = polylb.Cancelled
	}
	return res
}

// isContextError: err is a context's end (context.Canceled or
// DeadlineExceeded, or Triple's Canceled or DeadlineExceeded codes, which
// Triple gives a call whose context was done).
func isContextError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var te *tri.Error
	if errors.As(err, &te) {
		return te.Code() == tri.CodeCanceled || te.Code() == tri.CodeDeadlineExceeded
	}
	return false
}

// answersLater reports whether a call's result holds no answer of the
// provider yet when the invoker returns: a Triple stream (client, server or
// bidi; dubbo-go opens it without waiting for the provider, and the
// generated code needs the stream's own type, so its end cannot be watched)
// and an async or oneway call of the dubbo protocol (sent, answered later
// to a callback or never).
//
// u is the provider's URL as the call was sent: read after the call, the
// invoker's may be gone (dubbo-go drops it when a refresh destroys the
// provider meanwhile).
func answersLater(u *common.URL, inv base.Invocation) bool {
	if v, ok := inv.GetAttribute(constant.CallTypeKey); ok {
		switch v {
		case constant.CallClientStream, constant.CallServerStream, constant.CallBidiStream:
			return true
		}
	}
	if u != nil && u.Protocol == "dubbo" {
		async, err := strconv.ParseBool(inv.GetAttachmentWithDefaultValue(constant.AsyncKey, "false"))
		return err == nil && async
	}
	return false
}

// OnResponse passes the result on: Invoke has reported the call.
func (f *Filter) OnResponse(_ context.Context, res result.Result, _ base.Invoker, _ base.Invocation) result.Result {
	return res
}

// begin claims the invocation's pick for this provider, or counts a call
// sent without one; nil when polylb does not balance the service.
func begin(invoker base.Invoker, inv base.Invocation) (*picks, *pick) {
	u := invoker.GetURL()
	if u == nil {
		// Destroyed before the send (the protocol refuses the call): an
		// unsent pick for it is released when the invocation ends.
		return nil, nil
	}
	if ps := picksOf(inv, false); ps != nil {
		if p := ps.start(u); p != nil {
			return ps, p
		}
	}
	method := inv.ActualMethodName()
	lb := byName[methodParam(u, method, constant.LoadbalanceKey, constant.DefaultLoadBalance)]
	if lb == nil {
		return nil, nil
	}
	v, ok := lb.services.Load(u.ServiceKey())
	if !ok {
		return nil, nil // polylb has not balanced this service yet: no set to count in
	}
	st := v.(*serviceState)
	s := st.set.Load()
	if s == nil {
		return nil, nil
	}
	pos, ok := s.positionOfURL(u)
	if !ok {
		return nil, nil
	}
	b, err := st.bindingFor(s, method, u, false)
	if err != nil {
		return nil, nil // the LoadBalance reports configuration errors
	}
	// A select among this provider alone counts the call in flight.
	id, err := b.balancer.SelectAmong(b.method, nil, []uint64{s.ids[pos]}, nil)
	if err != nil {
		return nil, nil // the set changed meanwhile: the call goes uncounted
	}
	ps := picksOf(inv, true)
	p := ps.newPick()
	*p = pick{st: st, balancer: b.balancer, method: b.method, id: id, url: u, key: s.keys[pos]}
	ps.addStarted(p)
	return ps, p
}
