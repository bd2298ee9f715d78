package polylbdubbo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"
	"dubbo.apache.org/dubbo-go/v3/protocol/protocolwrapper"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
	"dubbo.apache.org/dubbo-go/v3/protocol/triple"
	tri "dubbo.apache.org/dubbo-go/v3/protocol/triple/triple_protocol"
	"github.com/apache/dubbo-go-hessian2/java_exception"
	perrors "github.com/pkg/errors"

	polylb "github.com/polylb/polylb/bindings/go"
)

func TestOutcomeOf(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want polylb.Outcome
	}{
		{"answer", bg, nil, polylb.Success},
		{"triple biz error", bg, tri.NewError(tri.CodeBizError, errors.New("no such user")), polylb.Success},
		{"triple not found", bg, tri.NewError(tri.CodeNotFound, errors.New("x")), polylb.Success},
		{"triple invalid argument", bg, tri.NewError(tri.CodeInvalidArgument, errors.New("x")), polylb.Success},
		{"triple deadline", bg, tri.NewError(tri.CodeDeadlineExceeded, errors.New("x")), polylb.Timeout},
		{"triple canceled by the caller", cancelled, tri.NewError(tri.CodeCanceled, context.Canceled), polylb.Cancelled},
		{"triple canceled under the call", bg, tri.NewError(tri.CodeCanceled, errors.New("stream reset")), polylb.Failure},
		{"triple unavailable", bg, tri.NewError(tri.CodeUnavailable, errors.New("x")), polylb.Failure},
		{"triple internal", bg, tri.NewError(tri.CodeInternal, errors.New("x")), polylb.Failure},
		{"triple request not encodable", bg, tri.NewError(tri.CodeInternal, fmt.Errorf("marshal message: %w", errors.New("type not supported! chan"))), polylb.Cancelled},
		{"triple request not compressible", bg, tri.NewError(tri.CodeInternal, errors.New("compress: short write")), polylb.Cancelled},
		{"triple request over the send limit", bg, tri.NewError(tri.CodeResourceExhausted, errors.New("compressed message size 9 exceeds sendMaxBytes 1")), polylb.Cancelled},
		{"triple resource exhausted", bg, tri.NewError(tri.CodeResourceExhausted, errors.New("shedding")), polylb.Failure},
		{"triple unknown", bg, tri.NewError(tri.CodeUnknown, errors.New("x")), polylb.Failure},
		{"dubbo java exception", bg, perrors.WithStack(java_exception.NewThrowable("biz")), polylb.Success},
		{"dubbo read timeout", bg, perrors.WithStack(errors.New("maybe the client read timeout or fail to decode tcp stream in Writer.Write")), polylb.Timeout},
		{"context deadline", bg, fmt.Errorf("call: %w", context.DeadlineExceeded), polylb.Timeout},
		{"net timeout", bg, &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, polylb.Timeout},
		{"context canceled", bg, context.Canceled, polylb.Cancelled},
		{"destroyed invoker", bg, base.ErrDestroyedInvoker, polylb.Cancelled},
		{"client closed", bg, base.ErrClientClosed, polylb.Cancelled},
		{"connection refused", bg, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, polylb.Failure},
		// Requests dubbo-go v3.3.1 fails before writing them (its own texts).
		{"triple attachment not a string", bg, errors.New("triple attachments value with key = traceId is invalid, which should be string or []string"), polylb.Cancelled},
		{"triple invocation without call type", bg, errors.New("miss CallType in invocation to invoke TripleInvoker"), polylb.Cancelled},
		{"triple invocation without method name", bg, errors.New("miss MethodName in invocation to invoke TripleInvoker"), polylb.Cancelled},
		{"triple call type not a string", bg, errors.New("CallType should be string, but got 1"), polylb.Cancelled},
		{"dubbo argument without hessian type", bg, perrors.WithStack(perrors.Wrapf(perrors.Errorf("cat not get arg (func())(0x1) type"), " PackRequest(args:[0x1])")), polylb.Cancelled},
		{"dubbo argument not encodable", bg, perrors.Wrapf(errors.New("unsupported"), "failed to encode argument: %v", 1), polylb.Cancelled},
		{"dubbo request over the payload limit", bg, perrors.WithStack(perrors.Errorf("Data length %d too large, max payload %d", 9000000, 8388608)), polylb.Cancelled},
		{"an error naming PackRequest further in", bg, errors.New("provider: PackRequest(args:[1]) failed"), polylb.Failure},
	} {
		if got := OutcomeOf(tc.ctx, &result.RPCResult{Err: tc.err}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Through the filter: each outcome lands in polylb's counters.
func TestOutcomesReachTheBalancer(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	p := newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName+"&retries=0")
	other := newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName+"&retries=0")
	var next error
	p.fn = func(ctx context.Context, inv base.Invocation) result.Result { return &result.RPCResult{Err: next} }
	other.fn = p.fn
	ci := clusterOf(t, "failover", wrapAll(p, other))
	errs := []error{
		nil,
		tri.NewError(tri.CodeBizError, errors.New("no such user")),
		tri.NewError(tri.CodeDeadlineExceeded, errors.New("late")),
		tri.NewError(tri.CodeUnavailable, errors.New("down")),
		base.ErrClientClosed,
	}
	for _, err := range errs {
		next = err
		call(ci, "sayHello")
		call(ci, "sayHello") // roundrobin 1:1: once on each provider
	}
	stats, err := Get(lbName).Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range stats[0].Invokers {
		got := fmt.Sprintf("succeeded %d failures %d timeouts %d", inv.Succeeded, inv.Failures, inv.Timeouts)
		// 2 successes (answer, business error), a timeout (counted as a
		// failure too), a failure; the never-sent call counts as neither.
		if want := "succeeded 2 failures 2 timeouts 1"; got != want {
			t.Errorf("%s: %s, want %s", inv.Address, got, want)
		}
	}
	assertNoneInFlight(t, lbName, svc)
}

// A request dubbo-go's TripleInvoker refuses before sending it (an attachment
// that is not a string, as a caller's map[string]any puts there; an
// invocation without its call type) is no verdict on the providers: the
// failover tries it on each, and none gets a failure for it.
func TestRequestsNeverSentAreNoProviderFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(inv *invocation.RPCInvocation)
	}{
		{"attachment not a string", func(inv *invocation.RPCInvocation) {
			inv.SetAttachment("traceId", 42)
			inv.SetAttribute(constant.CallTypeKey, constant.CallUnary)
		}},
		{"no call type", func(*invocation.RPCInvocation) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := serviceName(t)
			const lbName = "polylb-roundrobin"
			var invokers []base.Invoker
			for i := 1; i <= 3; i++ {
				// Nothing listens there: the call fails before any connection is used.
				u, err := common.NewURL(fmt.Sprintf("tri://127.0.0.1:%d/%s?interface=%s&serialization=hessian2&loadbalance=%s&retries=2&%s=polylb",
					40000+i, svc, svc, lbName, constant.ReferenceFilterKey))
				if err != nil {
					t.Fatal(err)
				}
				u.Methods = []string{"SayHello"}
				ti, err := triple.NewTripleInvoker(u)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(ti.Destroy)
				invokers = append(invokers, protocolwrapper.BuildInvokerChain(ti, constant.ReferenceFilterKey))
			}
			ci := clusterOf(t, "failover", invokers)
			var reply string
			inv := invocation.NewRPCInvocationWithOptions(invocation.WithMethodName("SayHello"),
				invocation.WithArguments([]any{"world"}), invocation.WithReply(&reply),
				invocation.WithParameterRawValues([]any{"world", &reply}))
			tc.prepare(inv)
			if res := ci.Invoke(context.Background(), inv); res.Error() == nil {
				t.Fatal("the call succeeded")
			} else if OutcomeOf(context.Background(), res) != polylb.Cancelled {
				t.Errorf("%q: %v, want Cancelled", res.Error(), OutcomeOf(context.Background(), res))
			}
			stats, err := Get(lbName).Stats(svc)
			if err != nil {
				t.Fatal(err)
			}
			var selected uint64
			for _, i := range stats[0].Invokers {
				selected += i.Selected
				if i.Failures != 0 || i.Succeeded != 0 {
					t.Errorf("%s: %d failures, %d successes for a request never sent", i.Address, i.Failures, i.Succeeded)
				}
			}
			if selected != 3 {
				t.Errorf("%d providers tried, want the failover's 3", selected)
			}
			assertNoneInFlight(t, lbName, svc)
		})
	}
}

// dubbo-go's failover retries after the caller's deadline has passed; Triple
// then fails each retry at once with DeadlineExceeded, without sending it.
// Only the attempt that ran out the deadline is a timeout: the retries are
// Cancelled, no timeout charged to providers that never saw the call.
func TestRetriesAfterTheDeadlineAreNoTimeouts(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	p := newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName+"&retries=2")
	other := newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName+"&retries=2")
	var attempts atomic.Int64
	p.fn = func(ctx context.Context, inv base.Invocation) result.Result {
		attempts.Add(1)
		<-ctx.Done() // the provider is slow: the deadline passes
		return &result.RPCResult{Err: tri.NewError(tri.CodeDeadlineExceeded, ctx.Err())}
	}
	other.fn = p.fn
	ci := clusterOf(t, "failover", wrapAll(p, other))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if res := ci.Invoke(ctx, invocation.NewRPCInvocation("sayHello", nil, nil)); res.Error() == nil {
		t.Fatal("the call succeeded past its deadline")
	}
	if n := attempts.Load(); n < 2 {
		t.Fatalf("%d attempts: the failover did not retry, so the test shows nothing", n)
	}
	stats, err := Get(lbName).Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	var selected, timeouts, failures uint64
	for _, inv := range stats[0].Invokers {
		selected += inv.Selected
		timeouts += inv.Timeouts
		failures += inv.Failures
	}
	// (The failover may select once more than it sends: that pick is released.)
	if selected < uint64(attempts.Load()) || timeouts != 1 || failures != 1 {
		t.Errorf("%d attempts: selected %d, timeouts %d, failures %d; want every attempt selected, one timeout (a failure too)",
			attempts.Load(), selected, timeouts, failures)
	}
	assertNoneInFlight(t, lbName, svc)
}

// A call made with a context already done is Cancelled only when it failed
// with the context's error (Triple fails it so, unsent). The dubbo protocol
// ignores the context and sends the call: its answer is a success, its
// failure a failure, as with a live context.
func TestCallsWithADoneContextKeepTheProvidersOutcome(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want string
	}{
		{"answered", cancelled, nil, "succeeded 1 failures 0 timeouts 0"},
		{"answered after the deadline", expired, nil, "succeeded 1 failures 0 timeouts 0"},
		{"business error", cancelled, java_exception.NewThrowable("no such user"), "succeeded 1 failures 0 timeouts 0"},
		{"provider failed", cancelled, tri.NewError(tri.CodeUnavailable, errors.New("down")), "succeeded 0 failures 1 timeouts 0"},
		{"read timeout", expired, perrors.New("maybe the client read timeout or fail to decode tcp stream in Writer.Write"), "succeeded 0 failures 1 timeouts 1"},
		{"triple refused it: canceled", cancelled, tri.NewError(tri.CodeCanceled, context.Canceled), "succeeded 0 failures 0 timeouts 0"},
		{"triple refused it: deadline", expired, tri.NewError(tri.CodeDeadlineExceeded, context.DeadlineExceeded), "succeeded 0 failures 0 timeouts 0"},
		{"the context's error", expired, context.DeadlineExceeded, "succeeded 0 failures 0 timeouts 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := serviceName(t)
			const lbName = "polylb-roundrobin"
			p := newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName+"&retries=0")
			other := newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName+"&retries=0")
			p.fn = func(context.Context, base.Invocation) result.Result {
				return &result.RPCResult{Err: tc.err, Rest: "answer"}
			}
			other.fn = p.fn
			ci := clusterOf(t, "failover", wrapAll(p, other))
			ci.Invoke(tc.ctx, newInvocation("sayHello"))
			stats, err := Get(lbName).Stats(svc)
			if err != nil {
				t.Fatal(err)
			}
			var succeeded, failures, timeouts uint64
			for _, inv := range stats[0].Invokers {
				succeeded += inv.Succeeded
				failures += inv.Failures
				timeouts += inv.Timeouts
			}
			if got := fmt.Sprintf("succeeded %d failures %d timeouts %d", succeeded, failures, timeouts); got != tc.want {
				t.Errorf("%s, want %s", got, tc.want)
			}
			assertNoneInFlight(t, lbName, svc)
		})
	}
}

// A call whose invoker returns before the provider answers — a Triple stream
// (dubbo-go opens it without waiting) or an async / oneway call of the dubbo
// protocol — is no fast success: a success there is reported as Cancelled
// (no latency, no success counted, nothing left in flight); an error at the
// open keeps its verdict. The same calls made as plain unary ones count.
func TestCallsAnsweredLaterAreNoFastSuccess(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol string
		prepare  func(inv *invocation.RPCInvocation)
		later    bool
	}{
		{"bidi-stream", "tri", func(inv *invocation.RPCInvocation) {
			inv.SetAttribute(constant.CallTypeKey, constant.CallBidiStream)
		}, true},
		{"server-stream", "tri", func(inv *invocation.RPCInvocation) {
			inv.SetAttribute(constant.CallTypeKey, constant.CallServerStream)
		}, true},
		{"client-stream", "tri", func(inv *invocation.RPCInvocation) {
			inv.SetAttribute(constant.CallTypeKey, constant.CallClientStream)
		}, true},
		{"unary", "tri", func(inv *invocation.RPCInvocation) {
			inv.SetAttribute(constant.CallTypeKey, constant.CallUnary)
		}, false},
		{"dubbo-async", "dubbo", func(inv *invocation.RPCInvocation) {
			inv.SetAttachment(constant.AsyncKey, "true")
		}, true},
		{"dubbo-sync", "dubbo", func(inv *invocation.RPCInvocation) {
			inv.SetAttachment(constant.AsyncKey, "false")
		}, false},
		{"tri-async-attachment", "tri", func(inv *invocation.RPCInvocation) {
			inv.SetAttachment(constant.AsyncKey, "true") // Triple ignores it: a unary call
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := serviceName(t)
			const lbName = "polylb-leastactive"
			var next error
			var ps []*provider
			for _, addr := range []string{"10.0.0.1:20000", "10.0.0.2:20000"} {
				u, err := common.NewURL(fmt.Sprintf("%s://%s/%s?interface=%s&%s=polylb&loadbalance=%s&retries=0",
					tc.protocol, addr, svc, svc, constant.ReferenceFilterKey, lbName))
				if err != nil {
					t.Fatal(err)
				}
				p := &provider{BaseInvoker: base.NewBaseInvoker(u)}
				p.fn = func(context.Context, base.Invocation) result.Result { return &result.RPCResult{Err: next} }
				ps = append(ps, p)
			}
			ci := clusterOf(t, "failover", wrapAll(ps...))
			invoke := func() {
				inv := newInvocation("chat")
				tc.prepare(inv)
				ci.Invoke(context.Background(), inv)
			}
			invoke()
			invoke()
			next = tri.NewError(tri.CodeUnavailable, errors.New("down"))
			invoke()
			invoke()
			stats, err := Get(lbName).Stats(svc)
			if err != nil {
				t.Fatal(err)
			}
			var selected, succeeded, failures uint64
			for _, inv := range stats[0].Invokers {
				selected += inv.Selected
				succeeded += inv.Succeeded
				failures += inv.Failures
			}
			wantSucceeded := uint64(2)
			if tc.later {
				wantSucceeded = 0
			}
			if selected != 4 || succeeded != wantSucceeded || failures != 2 {
				t.Errorf("selected %d, succeeded %d, failures %d; want 4, %d, 2",
					selected, succeeded, failures, wantSucceeded)
			}
			assertNoneInFlight(t, lbName, svc)
		})
	}
}

// An async dubbo call whose provider a registry refresh destroys while the
// call is out (dubbo-go drops the invoker's URL) is still no fast success.
func TestAnAsyncCallWhoseProviderLeavesMeanwhileIsNoSuccess(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-leastactive"
	var ps []*provider
	for _, addr := range []string{"10.0.0.1:20000", "10.0.0.2:20000"} {
		u, err := common.NewURL(fmt.Sprintf("dubbo://%s/%s?interface=%s&%s=polylb&loadbalance=%s&retries=0",
			addr, svc, svc, constant.ReferenceFilterKey, lbName))
		if err != nil {
			t.Fatal(err)
		}
		p := &provider{BaseInvoker: base.NewBaseInvoker(u)}
		p.fn = func(context.Context, base.Invocation) result.Result {
			p.Destroy() // the refresh, while the call is out
			return &result.RPCResult{}
		}
		ps = append(ps, p)
	}
	ci := clusterOf(t, "failover", wrapAll(ps...))
	inv := newInvocation("chat")
	inv.SetAttachment(constant.AsyncKey, "true")
	ci.Invoke(context.Background(), inv)
	st, ok := Get(lbName).services.Load(svc)
	if !ok {
		t.Fatal("the service was not balanced")
	}
	for _, b := range st.(*serviceState).balancers {
		s, err := b.Stats()
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range s.Invokers {
			if i.Succeeded != 0 || i.Active != 0 {
				t.Errorf("%s: %d successes, %d in flight; want none", i.Address, i.Succeeded, i.Active)
			}
		}
	}
}
