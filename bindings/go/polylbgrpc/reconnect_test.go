package polylbgrpc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
)

// A connection lost and made again is a reconnect of a listed endpoint, not
// a new provider: its invoker keeps its state (here its counters; also its
// latency estimate and its ejection) across it.
func TestReconnectKeepsTheEndpointsState(t *testing.T) {
	p, other := startProvider(t), startProvider(t)
	cl := dial(t, "loadbalance=roundrobin", []resolver.Endpoint{endpointOf(p.addr), endpointOf(other.addr)})
	cl.waitReady(t, p.addr, other.addr)
	for i := 0; i < 20; i++ { // roundrobin: 10 each
		if _, err := cl.service.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	before := byAddress(cl.stats(t), p.addr)

	p.lis.cut() // the other endpoint stays READY meanwhile
	// The client dials again only once it saw the connection go; then wait
	// for the endpoint to serve again.
	waitFor(t, "a new connection", func() bool { return p.lis.accepted.Load() >= 2 })
	waitFor(t, "the endpoint serving again", func() bool {
		_, err := cl.service.EmptyCall(context.Background(), &testpb.Empty{}, grpc.WaitForReady(true))
		return err == nil && p.calls.Load() > 10
	})
	inv := byAddress(cl.stats(t), p.addr)
	if inv.ID != before.ID || inv.Succeeded != uint64(p.calls.Load()) || inv.Active != 0 {
		t.Errorf("after a reconnect: id %d, succeeded %d, active %d; want id %d, succeeded %d (every call it served), active 0",
			inv.ID, inv.Succeeded, inv.Active, before.ID, p.calls.Load())
	}
}

// A server that ages its connections out (MaxConnectionAge, common in
// production) sends GOAWAY and lets the calls on the old connection finish
// while the client connects anew: the endpoint goes READY → IDLE → READY
// with a call still in flight on it. leastactive must keep counting that
// call, so the next calls go to the idle endpoint.
func TestCallInFlightAcrossGoAway(t *testing.T) {
	aging := startProvider(t, grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge:      100 * time.Millisecond,
		MaxConnectionAgeGrace: time.Minute,
	}))
	other := startProvider(t)
	cl := dialLevel(t, "loadbalance=leastactive", true, []resolver.Endpoint{endpointOf(aging.addr)})
	cl.waitReady(t, aging.addr)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := cl.service.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cl.resolver.UpdateState(resolver.State{Endpoints: []resolver.Endpoint{endpointOf(aging.addr), endpointOf(other.addr)}})
	cl.waitReady(t, aging.addr, other.addr)
	// A second connection means the first one got its GOAWAY (the client
	// dials again only after that); then wait for the endpoint to be READY.
	waitFor(t, "a reconnect after GOAWAY", func() bool { return aging.lis.accepted.Load() >= 2 })
	if _, err := cl.service.EmptyCall(context.Background(), &testpb.Empty{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}

	for i := 0; i < 20; i++ {
		host, err := unary(context.Background(), cl, codes.OK, 0)
		if err != nil {
			t.Fatal(err)
		}
		if host == aging.addr {
			t.Fatalf("call %d went to the endpoint whose stream is still open (across its reconnect)", i)
		}
	}
	close(aging.release)
	if _, err := stream.Recv(); err == nil {
		t.Fatal("stream did not end")
	}
	waitFor(t, "the stream reported", func() bool { return byAddress(cl.stats(t), aging.addr).Active == 0 })
}
