package polylbgrpc

import (
	"context"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
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
