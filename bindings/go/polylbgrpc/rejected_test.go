package polylbgrpc

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// providers starts n providers and lists an endpoint for each.
func providers(t *testing.T, n int) ([]*provider, []resolver.Endpoint) {
	t.Helper()
	var ps []*provider
	var eps []resolver.Endpoint
	for i := 0; i < n; i++ {
		p := startProvider(t)
		ps = append(ps, p)
		eps = append(eps, endpointOf(p.addr))
	}
	return ps, eps
}

// A first set the library rejects (maglev: more endpoints than its table has
// slots) fails RPCs at once with the library's reason; before, no picker was
// ever sent up and every RPC waited out its deadline.
func TestARejectedFirstSetFailsRPCsWithTheReason(t *testing.T) {
	_, eps := providers(t, 8)
	c := dial(t, "loadbalance=maglev&maglev.tableSize=7", eps)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := unary(ctx, c, codes.OK, 0)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "maglev") {
		t.Fatalf("err = %v, want Unavailable with the library's reason", err)
	}
}

// A set the library rejects keeps the previous one, and the picker goes on
// over it following its endpoints' states: an endpoint of it whose server goes
// away leaves the picker (before, the picker froze at the rejection and RPCs
// hashed to the lost endpoint waited out their deadlines), and the endpoint
// outside the set gets no call.
func TestARejectedSetKeepsThePickerFollowingTheKeptSet(t *testing.T) {
	ps, eps := providers(t, 8)
	c := dial(t, "loadbalance=maglev&maglev.tableSize=7", eps[:7])
	c.waitReady(t, ps[0].addr, ps[1].addr, ps[2].addr, ps[3].addr, ps[4].addr, ps[5].addr, ps[6].addr)
	c.resolver.UpdateState(resolver.State{Endpoints: eps}) // 8 > 7 slots: rejected
	ps[0].server.Stop()
	stopped := byAddress(c.stats(t), ps[0].addr).ID
	waitFor(t, "the picker to leave out the stopped endpoint", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		p, ok := c.state.Picker.(*picker)
		if !ok {
			return false
		}
		_, in := p.pickers[stopped]
		return !in
	})
	for k := 0; k < 40; k++ {
		ctx, cancel := context.WithTimeout(WithKey(context.Background(), []byte{byte(k)}), 5*time.Second)
		_, err := unary(ctx, c, codes.OK, 0)
		cancel()
		if err != nil {
			t.Fatalf("key %d: %v", k, err)
		}
	}
	if n := ps[7].calls.Load(); n != 0 {
		t.Errorf("the endpoint outside the kept set got %d calls", n)
	}
	if got := len(c.stats(t).Invokers); got != 7 {
		t.Errorf("the library holds %d invokers, want the 7 kept", got)
	}
}

// A rejected update that also drops an endpoint: the library keeps it (a
// rejected update changes nothing), gRPC has shut its connection down. Calls go
// to the kept set's other endpoints; before, each call the library picked for
// the dropped one waited for a picker that never came (to its deadline).
func TestARejectedUpdateThatDropsAnEndpointNeverPicksIt(t *testing.T) {
	ps, eps := providers(t, 9)
	c := dial(t, "loadbalance=maglev&maglev.tableSize=7", eps[:7])
	c.waitReady(t, ps[0].addr, ps[1].addr, ps[2].addr, ps[3].addr, ps[4].addr, ps[5].addr, ps[6].addr)
	c.resolver.UpdateState(resolver.State{Endpoints: eps[1:]}) // 8 > 7 slots: rejected
	waitFor(t, "the picker to leave out the dropped endpoint", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		p, ok := c.state.Picker.(*picker)
		return ok && len(p.pickers) == 6
	})
	before := ps[0].calls.Load()
	for k := 0; k < 60; k++ {
		ctx, cancel := context.WithTimeout(WithKey(context.Background(), []byte{byte(k)}), 2*time.Second)
		_, err := unary(ctx, c, codes.OK, 0)
		cancel()
		if err != nil {
			t.Fatalf("key %d: %v", k, err)
		}
	}
	if n := ps[0].calls.Load() - before; n != 0 {
		t.Errorf("the dropped endpoint got %d calls", n)
	}
	if n := ps[7].calls.Load() + ps[8].calls.Load(); n != 0 {
		t.Errorf("the endpoints outside the kept set got %d calls", n)
	}
	if got := len(c.stats(t).Invokers); got != 7 {
		t.Errorf("the library holds %d invokers, want the 7 kept", got)
	}
}

// A config change whose balancer rejects the listed endpoints is not taken:
// the channel goes on with the balancer it has, which is not closed.
func TestAConfigChangeRejectingTheSetKeepsTheBalancer(t *testing.T) {
	ps, eps := providers(t, 8)
	c := dial(t, "loadbalance=roundrobin", eps)
	c.waitReady(t, ps[0].addr, ps[1].addr, ps[2].addr, ps[3].addr, ps[4].addr, ps[5].addr, ps[6].addr, ps[7].addr)
	before := c.lb(t)
	sc := c.resolver.CC().ParseServiceConfig(serviceConfig(c.name, "loadbalance=maglev&maglev.tableSize=7"))
	c.resolver.UpdateState(resolver.State{Endpoints: eps, ServiceConfig: sc})
	for k := 0; k < 16; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := unary(ctx, c, codes.OK, 0)
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", k, err)
		}
	}
	if c.lb(t) != before {
		t.Fatal("a balancer that rejected the endpoints was taken")
	}
	if s := c.stats(t); s.Strategy != "roundrobin" || len(s.Invokers) != 8 {
		t.Fatalf("strategy %q over %d invokers, want roundrobin over 8", s.Strategy, len(s.Invokers))
	}
}

// A wait-for-ready RPC waits while no set the library took is reachable, a
// rejected update or not: the pickers' errors are no gRPC statuses, which
// gRPC takes as a drop that ends even a wait-for-ready RPC, never retried.
// Before, the same outage ended it at once after a rejected update and made
// it wait without one.
func TestWaitForReadyRPCsWaitAfterARejectedUpdate(t *testing.T) {
	for _, rejected := range []bool{false, true} {
		ps, eps := providers(t, 8)
		c := dial(t, "loadbalance=maglev&maglev.tableSize=7", eps[:7])
		c.waitReady(t, ps[0].addr, ps[1].addr, ps[2].addr, ps[3].addr, ps[4].addr, ps[5].addr, ps[6].addr)
		if rejected {
			c.resolver.UpdateState(resolver.State{Endpoints: eps}) // 8 > 7 slots: rejected, the 7 kept
		}
		for _, p := range ps {
			p.server.Stop()
		}
		waitFor(t, "TRANSIENT_FAILURE", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := c.service.EmptyCall(ctx, &testpb.Empty{})
			return status.Code(err) == codes.Unavailable && c.conn.GetState() == connectivity.TransientFailure
		})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := c.service.EmptyCall(ctx, &testpb.Empty{}, grpc.WaitForReady(true))
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("rejected update %v: the wait-for-ready RPC ended before its deadline: %v", rejected, err)
		}
	}
}

// A first set rejected fails fail-fast RPCs with the reason (above) and keeps
// wait-for-ready ones waiting, until a set the library takes serves them.
func TestWaitForReadyRPCsOutwaitARejectedFirstSet(t *testing.T) {
	ps, eps := providers(t, 8)
	c := dial(t, "loadbalance=maglev&maglev.tableSize=7", eps)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := unary(ctx, c, codes.OK, 0); status.Code(err) != codes.Unavailable {
		t.Fatalf("fail-fast RPC: %v, want Unavailable", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.service.EmptyCall(ctx, &testpb.Empty{}, grpc.WaitForReady(true))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the wait-for-ready RPC ended with the set rejected: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	c.resolver.UpdateState(resolver.State{Endpoints: eps[:7]})
	if err := <-done; err != nil {
		t.Fatalf("the wait-for-ready RPC after a set was taken: %v", err)
	}
	if n := ps[7].calls.Load(); n != 0 {
		t.Errorf("the endpoint never in a set got %d calls", n)
	}
}

// stateCC is a ClientConn that keeps the states the policy sends up and
// nothing else (its other methods are not expected to be called).
type stateCC struct {
	balancer.ClientConn
	states []balancer.State
}

func (cc *stateCC) UpdateState(s balancer.State) { cc.states = append(cc.states, s) }

// A Config built by hand skips ParseConfig: one the library refuses fails
// RPCs with the reason instead of leaving the channel without a picker (RPCs
// then waited out their deadlines).
func TestAHandBuiltConfigTheLibraryRefusesFailsRPCsWithTheReason(t *testing.T) {
	cc := &stateCC{}
	p := balancer.Get(Name).Build(cc, balancer.BuildOptions{})
	defer p.Close()
	err := p.UpdateClientConnState(balancer.ClientConnState{
		ResolverState:  resolver.State{Endpoints: []resolver.Endpoint{{Addresses: []resolver.Address{{Addr: "127.0.0.1:1"}}}}},
		BalancerConfig: &Config{Config: "loadbalance=nosuchstrategy"},
	})
	if err == nil || !strings.Contains(err.Error(), "nosuchstrategy") {
		t.Fatalf("err = %v, want the library's reason", err)
	}
	if len(cc.states) != 1 || cc.states[0].ConnectivityState != connectivity.TransientFailure {
		t.Fatalf("states sent up = %+v, want one TRANSIENT_FAILURE", cc.states)
	}
	_, pickErr := cc.states[0].Picker.Pick(balancer.PickInfo{Ctx: context.Background()})
	if pickErr == nil || !strings.Contains(pickErr.Error(), "nosuchstrategy") {
		t.Fatalf("pick error = %v, want the library's reason", pickErr)
	}
}
