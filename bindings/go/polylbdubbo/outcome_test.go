package polylbdubbo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
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
		{"triple unknown", bg, tri.NewError(tri.CodeUnknown, errors.New("x")), polylb.Failure},
		{"dubbo java exception", bg, perrors.WithStack(java_exception.NewThrowable("biz")), polylb.Success},
		{"dubbo read timeout", bg, perrors.WithStack(errors.New("maybe the client read timeout or fail to decode tcp stream in Writer.Write")), polylb.Timeout},
		{"context deadline", bg, fmt.Errorf("call: %w", context.DeadlineExceeded), polylb.Timeout},
		{"net timeout", bg, &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, polylb.Timeout},
		{"context canceled", bg, context.Canceled, polylb.Cancelled},
		{"destroyed invoker", bg, base.ErrDestroyedInvoker, polylb.Cancelled},
		{"client closed", bg, base.ErrClientClosed, polylb.Cancelled},
		{"connection refused", bg, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, polylb.Failure},
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
