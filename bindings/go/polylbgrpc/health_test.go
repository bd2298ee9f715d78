package polylbgrpc

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health" // client-side health checking (and the server)
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
)

// gRPC's client-side health checking (healthCheckConfig in the service
// config, the health package imported): an endpoint whose server reports
// NOT_SERVING leaves the policy's picker — no call reaches it — while it
// stays in polylb's set with its history, and it takes calls again once it
// reports SERVING.
func TestHealthCheckingTakesAnEndpointOutOfThePicker(t *testing.T) {
	status := health.NewServer()
	sick := startProviderWith(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, status) })
	well := startProviderWith(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, health.NewServer()) })
	cl := dialWith(t, `{"loadBalancingConfig": [{%q: {"config": "loadbalance=roundrobin"}}],
		"healthCheckConfig": {"serviceName": ""}}`,
		[]resolver.Endpoint{endpointOf(sick.addr), endpointOf(well.addr)})
	cl.waitReady(t, sick.addr, well.addr)
	ctx := context.Background()
	calls := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if _, err := unary(ctx, cl, codes.OK, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	calls(20)
	if sick.calls.Load() != 10 {
		t.Fatalf("round robin over two healthy endpoints: %d of 20 calls on the first, want 10", sick.calls.Load())
	}

	status.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	cl.waitReady(t, well.addr)
	before := sick.calls.Load()
	calls(20)
	if got := sick.calls.Load() - before; got != 0 {
		t.Errorf("%d calls reached the endpoint reporting NOT_SERVING", got)
	}
	if inv := byAddress(cl.stats(t), sick.addr); inv.Selected != 10 {
		t.Errorf("the unhealthy endpoint's polylb state: %+v, want it kept (selected 10)", inv)
	}

	status.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	cl.waitReady(t, sick.addr, well.addr)
	before = sick.calls.Load()
	calls(20)
	if got := sick.calls.Load() - before; got != 10 {
		t.Errorf("back to SERVING: %d of 20 calls, want round robin's 10", got)
	}
}
