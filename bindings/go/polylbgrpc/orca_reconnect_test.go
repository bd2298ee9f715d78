package polylbgrpc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
)

// gRFC A58 (and grpc-go's weighted_round_robin): when an endpoint's
// connection becomes READY again, its weight is reset and a new blackout
// starts (non_empty_since and last_updated cleared): the server behind a
// reconnect may be a restarted, cold process. The policy reports the
// reconnect (ReportReconnect), so orca's old weight stops counting, and
// counts again a blackout after the reports over the new connection start.
func TestOrcaReconnectRestartsTheBlackout(t *testing.T) {
	small, large := startProvider(t), startProvider(t)
	small.load.Store(&serverLoad{qps: 100, application: 1.0})
	large.load.Store(&serverLoad{qps: 100, application: 0.25})
	providers := []*provider{small, large}
	const blackout = 1500 * time.Millisecond
	cl := dial(t, "loadbalance=orca&orca.blackoutMs=1500&orca.updateMs=20",
		[]resolver.Endpoint{endpointOf(small.addr), endpointOf(large.addr)})
	cl.waitReady(t, small.addr, large.addr)
	dealt(t, cl, providers, 20)
	time.Sleep(blackout + 200*time.Millisecond)
	dealt(t, cl, providers, 20)
	if o, _ := byAddress(cl.stats(t), large.addr).Orca(); !o.Counted {
		t.Fatalf("before the reconnect: large not counted: %+v", o)
	}

	large.lis.cut()
	waitFor(t, "a new connection", func() bool { return large.lis.accepted.Load() >= 2 })
	served := large.calls.Load()
	waitFor(t, "the endpoint serving again", func() bool {
		_, err := cl.service.EmptyCall(context.Background(), &testpb.Empty{}, grpc.WaitForReady(true))
		return err == nil && large.calls.Load() > served
	})
	reconnected := time.Now()
	got := dealt(t, cl, providers, 100)
	o, _ := byAddress(cl.stats(t), large.addr).Orca()
	if time.Since(reconnected) < blackout && o.Counted {
		t.Errorf("%v after the reconnect (within the %v blackout) the old weight still counts (%+v); calls %v of 100 (1:4), want a new blackout as gRPC's weighted_round_robin", time.Since(reconnected), blackout, o, got)
	}

	// The new run's blackout ends: the weight counts again.
	time.Sleep(blackout + 200*time.Millisecond)
	dealt(t, cl, providers, 20)
	if o, _ := byAddress(cl.stats(t), large.addr).Orca(); !o.Counted {
		t.Errorf("a blackout after the reconnect: large not counted again: %+v", o)
	}
}
