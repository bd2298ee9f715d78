package polylbgrpc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// An idle ClientConn (grpc.WithIdleTimeout; 30 minutes by default) closes
// its policy and builds a new one when an RPC wakes it: the closed policy's
// balancer is closed (not leaked), and the new one balances and reports.
func TestIdleChannelWakes(t *testing.T) {
	p := startProvider(t)
	cl := dialWith(t, `{"loadBalancingConfig": [{%q: {"config": "loadbalance=leastactive"}}]}`,
		[]resolver.Endpoint{endpointOf(p.addr)}, grpc.WithIdleTimeout(100*time.Millisecond))
	for round := 0; round < 2; round++ {
		for i := 0; i < 3; i++ {
			if _, err := cl.service.EmptyCall(context.Background(), &testpb.Empty{}, grpc.WaitForReady(true)); err != nil {
				t.Fatal(err)
			}
		}
		lb := cl.lb(t)
		if inv := byAddress(cl.stats(t), p.addr); inv.Succeeded != 3 || inv.Active != 0 {
			t.Errorf("round %d: %+v, want 3 succeeded, none in flight", round, inv)
		}
		waitFor(t, "the channel idle", func() bool { return cl.conn.GetState() == connectivity.Idle })
		waitFor(t, "the idle policy's balancer closed", func() bool {
			_, err := lb.Stats()
			return errors.Is(err, polylb.ErrClosed)
		})
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if n := len(cl.balancers); n != 2 {
		t.Errorf("%d balancers built, want 2 (one per wake)", n)
	}
}

// gRPC's retries (a service config's retryPolicy) pick again for each
// attempt: each attempt is one select and one report.
func TestRetriesReportEachAttempt(t *testing.T) {
	p := startProvider(t)
	cl := dialWith(t, `{"loadBalancingConfig": [{%q: {"config": "loadbalance=leastactive"}}],
		"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
			"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
			"retryableStatusCodes": ["UNAVAILABLE"]}}]}`, []resolver.Endpoint{endpointOf(p.addr)})
	cl.waitReady(t, p.addr)
	if _, err := unary(context.Background(), cl, codes.Unavailable, 0); status.Code(err) != codes.Unavailable {
		t.Fatalf("want UNAVAILABLE, got %v", err)
	}
	inv := byAddress(cl.stats(t), p.addr)
	if p.calls.Load() != 3 || inv.Selected != 3 || inv.Failures != 3 || inv.Active != 0 {
		t.Errorf("3 attempts: server saw %d, stats %+v; want 3 selected, 3 failures, none in flight", p.calls.Load(), inv)
	}
}

// A provider stopping gracefully (GOAWAY, calls in flight allowed to end)
// fails no call: the held ones end well, new ones go to the other
// provider; every in-flight count returns to 0.
func TestGracefulStopFailsNoCall(t *testing.T) {
	a, b := startProvider(t), startProvider(t)
	cl := dialLevel(t, "loadbalance=roundrobin", true, []resolver.Endpoint{endpointOf(a.addr), endpointOf(b.addr)})
	cl.waitReady(t, a.addr, b.addr)
	held := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			_, err := unary(context.Background(), cl, codes.OK, 200)
			held <- err
		}()
	}
	waitFor(t, "the held calls", func() bool { return a.calls.Load() > 0 && a.calls.Load()+b.calls.Load() == 8 })

	stopped := make(chan struct{})
	callers := callUntil(cl, 4, stopped)
	go func() {
		a.server.GracefulStop() // returns once the held calls on a ended
		close(stopped)
	}()
	for i := 0; i < 8; i++ {
		if err := <-held; err != nil {
			t.Errorf("held call: %v", err)
		}
	}
	for err := range callers {
		t.Errorf("call during the stop: %v", err)
	}
	for _, inv := range cl.stats(t).Invokers {
		if inv.Active != 0 || inv.Failures != 0 {
			t.Errorf("%s: %d in flight, %d failures; want none", inv.Address, inv.Active, inv.Failures)
		}
	}
}

// A config change replaces the balancer while calls run (go test -race): no
// call fails, and the last balancer ends with nothing in flight.
func TestConfigChangesUnderLoad(t *testing.T) {
	a, b := startProvider(t), startProvider(t)
	eps := []resolver.Endpoint{endpointOf(a.addr), endpointOf(b.addr)}
	cl := dial(t, "loadbalance=random", eps)
	cl.waitReady(t, a.addr, b.addr)
	stop := make(chan struct{})
	callers := callUntil(cl, 4, stop)
	configs := []string{"loadbalance=leastactive", "loadbalance=p2c", "loadbalance=peakewma", "loadbalance=random"}
	for i := 0; i < 12; i++ {
		sc := cl.resolver.CC().ParseServiceConfig(serviceConfig(cl.name, configs[i%len(configs)]))
		cl.resolver.UpdateState(resolver.State{Endpoints: eps, ServiceConfig: sc})
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	for err := range callers {
		t.Errorf("call during the changes: %v", err)
	}
	for _, inv := range cl.stats(t).Invokers {
		if inv.Active != 0 {
			t.Errorf("%s: %d in flight", inv.Address, inv.Active)
		}
	}
}

// callUntil runs n goroutines of calls (fail-fast unless opts say otherwise)
// until stop is closed or a call fails; the channel it returns yields their
// errors and is closed when all returned.
func callUntil(cl *client, n int, stop <-chan struct{}, opts ...grpc.CallOption) <-chan error {
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := cl.service.EmptyCall(ctx, &testpb.Empty{}, opts...)
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(errs)
	}()
	return errs
}
