package polylbgrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync/atomic"

	polylb "github.com/polylb/polylb/bindings/go"
	"github.com/polylb/polylb/bindings/go/polylbgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental/balancer/weight"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// A ClientConn balanced by polylb's peakewma over three providers weighted
// 1:1:2. Every RPC's end is reported to the balancer, which is reached here
// through Options.Observe to print its counters. README.md shows this
// function's body (TestReadmeShowsTheExample checks it).
func Example() {
	addrs := startProviders(3) // in production: your resolver's (DNS, xDS, a registry)

	var lb atomic.Pointer[polylb.Balancer]
	balancer.Register(polylbgrpc.NewBuilder("polylb_observed", polylbgrpc.Options{
		Observe: func(b *polylb.Balancer) { lb.Store(b) },
	}))
	r := manual.NewBuilderWithScheme("example")
	r.InitialState(resolver.State{Endpoints: []resolver.Endpoint{
		{Addresses: []resolver.Address{{Addr: addrs[0]}}},
		{Addresses: []resolver.Address{{Addr: addrs[1]}}},
		weight.Set(resolver.Endpoint{Addresses: []resolver.Address{{Addr: addrs[2]}}}, weight.EndpointInfo{Weight: 200}),
	}})
	conn, err := grpc.NewClient("example:///greeter",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// With the package's own registration: [{"polylb": {...}}].
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [
			{"polylb_observed": {"config": "loadbalance=peakewma&peakewma.decay=5000"}}]}`))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	client := testgrpc.NewTestServiceClient(conn)
	for i := 0; i < 100; i++ {
		if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}, grpc.WaitForReady(true)); err != nil {
			log.Fatal(err)
		}
	}

	stats, err := lb.Load().Stats()
	if err != nil {
		log.Fatal(err)
	}
	var succeeded uint64
	var active int64
	for _, inv := range stats.Invokers {
		succeeded += inv.Succeeded
		active += inv.Active
	}
	fmt.Printf("%s: %d calls reported, %d in flight\n", stats.Strategy, succeeded, active)
	// Output:
	// peakewma: 100 calls reported, 0 in flight
}

type emptyService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (emptyService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func startProviders(n int) []string {
	var addrs []string
	for i := 0; i < n; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		server := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(server, emptyService{})
		go server.Serve(lis)
		addrs = append(addrs, lis.Addr().String())
	}
	return addrs
}
