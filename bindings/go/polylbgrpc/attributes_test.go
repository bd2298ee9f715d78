package polylbgrpc

import (
	"context"
	"net"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental/balancer/weight"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
)

// A resolver that sets a negative weight through SetInvoker (the library
// rejects a set holding one) must not stall the ClientConn: that endpoint
// weighs 0, the others serve.
func TestNegativeWeightDoesNotStall(t *testing.T) {
	a, b := startProvider(t), startProvider(t)
	bad := polylb.NewInvoker(0, "")
	bad.Weight = -1
	cl := dial(t, "loadbalance=roundrobin", []resolver.Endpoint{endpointOf(a.addr), SetInvoker(endpointOf(b.addr), bad)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := cl.service.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	cl.waitReady(t, a.addr, b.addr)
	a.calls.Store(0)
	for i := 0; i < 10; i++ {
		if _, err := cl.service.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.calls.Load(); n != 10 {
		t.Errorf("the endpoint of weight 100 got %d of 10 calls beside one of weight 0", n)
	}
}

// gRPC's addresses and a resolver's zones are bytes; the library takes UTF-8
// and rejects a whole set for one text that is not. One such endpoint must
// not fail the channel: its stray bytes reach the library escaped, and both
// endpoints serve. Before, every RPC failed with the library's rejection.
func TestAnEndpointThatIsNotUTF8DoesNotFailTheChannel(t *testing.T) {
	dir := t.TempDir()
	good, zonedPath, bad := dir+"/good.sock", dir+"/zoned.sock", dir+"/bad\xff.sock"
	servers := map[string]*provider{}
	for _, path := range []string{good, zonedPath, bad} {
		servers[path] = unixProvider(t, path)
	}
	zoned := polylb.NewInvoker(0, "")
	zoned.Zone = "eu\xff"
	eps := []resolver.Endpoint{endpointOf(good), endpointOf(bad), SetInvoker(endpointOf(zonedPath), zoned)}
	c := dialWith(t, `{"loadBalancingConfig": [{%q: {"config": "loadbalance=roundrobin"}}]}`, eps,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 30; i++ {
		if _, err := c.service.EmptyCall(ctx, &testpb.Empty{}, grpc.WaitForReady(true)); err != nil {
			t.Fatal(err)
		}
	}
	escaped := dir + `/bad\xff.sock`
	c.waitReady(t, good, zonedPath, escaped)
	for _, p := range servers {
		p.calls.Store(0)
	}
	for i := 0; i < 30; i++ {
		if _, err := c.service.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	for path, p := range servers {
		if n := p.calls.Load(); n != 10 {
			t.Errorf("%q got %d of 30 round-robin calls", path, n)
		}
	}
	stats := c.stats(t)
	if got := byAddress(stats, escaped); got.ID == 0 {
		t.Errorf("no invoker at the escaped address: %+v", stats.Invokers)
	}
	if got := byAddress(stats, zonedPath); got.Zone != `eu\xff` {
		t.Errorf("zone %q, want the stray byte escaped", got.Zone)
	}
}

// An endpoint listed twice (the same address) with different weights is one
// invoker with its first listing's fields, however endpointsharding orders
// the duplicates: before, identical updates moved its weight between the two.
func TestAnEndpointListedTwiceTakesItsFirstListing(t *testing.T) {
	a, b := startProvider(t), startProvider(t)
	eps := []resolver.Endpoint{
		weight.Set(endpointOf(a.addr), weight.EndpointInfo{Weight: 1}),
		weight.Set(endpointOf(a.addr), weight.EndpointInfo{Weight: 9}),
		endpointOf(b.addr),
	}
	c := dial(t, "loadbalance=roundrobin", eps)
	c.waitReady(t, a.addr, b.addr)
	for i := 0; i < 40; i++ {
		c.resolver.UpdateState(resolver.State{Endpoints: eps})
		if w := byAddress(c.stats(t), a.addr).Weight; w != 1 {
			t.Fatalf("update %d: weight %d, want the first listing's 1", i, w)
		}
	}
}

// unixProvider serves the test service on a unix socket at path.
func unixProvider(t *testing.T, path string) *provider {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &provider{addr: path, release: make(chan struct{})}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, p)
	p.server = s
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return p
}

// An endpoint's invoker address is its IP in the form the Java policy writes
// (Endpoint.addressOf: RFC 5952, an IPv4-mapped address as IPv4, the port in
// decimal), however the resolver wrote it, so that Go and Java clients place a
// server at one point of the ring and send a key to the same server. Before,
// grpc-go's text was kept: "[2001:DB8:0:0:0:0:0:1]:443" against Java's
// "[2001:db8::1]:443".
func TestEndpointAddressIsTheJavaPolicysForm(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"10.0.0.1:443", "10.0.0.1:443"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"[2001:DB8:0:0:0:0:0:1]:443", "[2001:db8::1]:443"},
		{"[0:0:0:0:0:0:0:1]:8080", "[::1]:8080"},
		{"[2001:db8:0:0:1:0:0:1]:8080", "[2001:db8::1:0:0:1]:8080"},
		{"[::ffff:10.0.0.1]:443", "10.0.0.1:443"},
		{"[fe80::1%3]:80", "[fe80::1%3]:80"},
		{"10.0.0.1:0443", "10.0.0.1:443"},
		{"svc.internal:443", "svc.internal:443"},
		{"/tmp/s.sock", "/tmp/s.sock"},
	} {
		inv := invokerOf(1, resolver.Endpoint{Addresses: []resolver.Address{{Addr: tc.addr}}})
		if inv.Address != tc.want {
			t.Errorf("%s: invoker address %q, want %q (the Java policy's)", tc.addr, inv.Address, tc.want)
		}
	}
}
