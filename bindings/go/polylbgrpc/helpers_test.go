package polylbgrpc

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/orca" // also makes this client parse ORCA trailers
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// provider is a real gRPC server on a local port. UnaryCall answers with the
// status the request asks for (ResponseStatus) after holding it ResponseSize
// milliseconds; StreamingOutputCall sends one message and holds the stream
// open until release is closed.
type provider struct {
	testgrpc.UnimplementedTestServiceServer
	addr    string
	server  *grpc.Server
	calls   atomic.Int64
	release chan struct{}
	slow    atomic.Int64               // extra hold of every UnaryCall, in ns
	cpu     atomic.Uint64              // math.Float64bits of the CPU utilization each call reports (ORCA), 0 = none
	load    atomic.Pointer[serverLoad] // what else each call reports (ORCA), nil = nothing
	lis     *trackingListener
}

func startProvider(t *testing.T, opts ...grpc.ServerOption) *provider {
	t.Helper()
	return startProviderWith(t, nil, opts...)
}

// startProviderWith registers more services with register before the server
// serves (grpc refuses a registration after Serve, killing the process).
func startProviderWith(t *testing.T, register func(*grpc.Server), opts ...grpc.ServerOption) *provider {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &trackingListener{Listener: l}
	opts = append([]grpc.ServerOption{orca.CallMetricsServerOption(nil)}, opts...)
	p := &provider{addr: lis.Addr().String(), server: grpc.NewServer(opts...), release: make(chan struct{}), lis: lis}
	testgrpc.RegisterTestServiceServer(p.server, p)
	if register != nil {
		register(p.server)
	}
	go p.server.Serve(lis)
	t.Cleanup(p.server.Stop)
	return p
}

// serverLoad is what a provider's calls report in their ORCA trailers besides
// the CPU utilization: queries and errors per second and the application's
// utilization (0 = not set).
type serverLoad struct{ qps, eps, application float64 }

// trackingListener counts the connections a provider accepted and can cut
// them (a connection lost under the client, the server still up).
type trackingListener struct {
	net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// cut closes every connection accepted so far.
func (l *trackingListener) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

func (p *provider) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	p.calls.Add(1)
	if cpu := math.Float64frombits(p.cpu.Load()); cpu > 0 {
		orca.CallMetricsRecorderFromContext(ctx).SetCPUUtilization(cpu)
	}
	if load := p.load.Load(); load != nil {
		rec := orca.CallMetricsRecorderFromContext(ctx)
		rec.SetQPS(load.qps)
		rec.SetEPS(load.eps)
		if load.application > 0 {
			rec.SetApplicationUtilization(load.application)
		}
	}
	if hold := time.Duration(req.ResponseSize)*time.Millisecond + time.Duration(p.slow.Load()); hold > 0 {
		select {
		case <-time.After(hold):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s := req.ResponseStatus; s != nil && s.Code != 0 {
		return nil, status.Error(codes.Code(s.Code), s.Message)
	}
	return &testpb.SimpleResponse{Hostname: p.addr}, nil
}

func (p *provider) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	p.calls.Add(1)
	return &testpb.Empty{}, nil
}

func (p *provider) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	p.calls.Add(1)
	if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	select {
	case <-p.release:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	if s := req.ResponseStatus; s != nil && s.Code != 0 {
		return status.Error(codes.Code(s.Code), s.Message)
	}
	return nil
}

// client is a ClientConn balanced by the policy over endpoints given by a
// manual resolver, with the policy's polylb balancer at hand for its stats.
type client struct {
	conn     *grpc.ClientConn
	resolver *manual.Resolver
	service  testgrpc.TestServiceClient
	name     string // the test builder's name, if dialled through one

	mu        sync.Mutex
	balancers []*polylb.Balancer
	state     balancer.State // the last state the policy sent up

	oob *oobCounts // the policy's OOB listeners, counted
}

// recordingBuilder builds the policy with a ClientConn that records the
// states it sends up, so that tests see which endpoints its picker serves.
type recordingBuilder struct {
	builder
	c *client
}

func (b recordingBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	return b.builder.Build(&recordingCC{ClientConn: cc, c: b.c}, opts)
}

type recordingCC struct {
	balancer.ClientConn
	c *client
}

func (cc *recordingCC) UpdateState(s balancer.State) {
	// gRPC first, so that a test that sees the new state (waitReady) never
	// races a call still picked by the previous picker.
	cc.ClientConn.UpdateState(s)
	cc.c.mu.Lock()
	cc.c.state = s
	cc.c.mu.Unlock()
}

var builderSeq atomic.Int64

// dial registers a builder of the policy under a name of the test's own (to
// observe its balancers) and connects through it to the endpoints.
func dial(t *testing.T, config string, endpoints []resolver.Endpoint) *client {
	t.Helper()
	return dialLevel(t, config, false, endpoints)
}

// dialLevel is dial with the policy's serviceLevel setting.
func dialLevel(t *testing.T, config string, serviceLevel bool, endpoints []resolver.Endpoint) *client {
	t.Helper()
	c := newClient()
	c.connect(t, serviceConfigLevel(c.name, config, serviceLevel), endpoints)
	return c
}

// dialWith connects with a service config whose %[1]q stands for the
// policy's name in it, and with further dial options.
func dialWith(t *testing.T, serviceConfig string, endpoints []resolver.Endpoint, opts ...grpc.DialOption) *client {
	t.Helper()
	c := newClient()
	c.connect(t, fmt.Sprintf(serviceConfig, c.name), endpoints, opts...)
	return c
}

// newClient registers a builder of the policy under a name of the client's
// own, which records the balancers and states of the policies it builds and
// counts the OOB listeners they register.
func newClient() *client {
	c := &client{oob: newOOBCounts()}
	c.name = "polylb_test_" + strconv.FormatInt(builderSeq.Add(1), 10)
	b := NewBuilder(c.name, Options{Observe: func(lb *polylb.Balancer) {
		c.mu.Lock()
		c.balancers = append(c.balancers, lb)
		c.mu.Unlock()
	}}).(builder)
	b.registerOOB = c.oob.register
	balancer.Register(recordingBuilder{builder: b, c: c})
	return c
}

// dialRaw connects with a whole service config (the package's own "polylb"
// builder, which nothing observes).
func dialRaw(t *testing.T, serviceConfig string, endpoints []resolver.Endpoint) *client {
	t.Helper()
	c := &client{}
	builderSeq.Add(1)
	c.connect(t, serviceConfig, endpoints)
	return c
}

func (c *client) connect(t *testing.T, serviceConfig string, endpoints []resolver.Endpoint, opts ...grpc.DialOption) {
	t.Helper()
	c.resolver = manual.NewBuilderWithScheme("polylbtest" + strconv.FormatInt(builderSeq.Load(), 10))
	c.resolver.InitialState(resolver.State{Endpoints: endpoints})
	conn, err := grpc.NewClient(c.resolver.Scheme()+":///service", append([]grpc.DialOption{
		grpc.WithResolvers(c.resolver),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.conn = conn
	c.service = testgrpc.NewTestServiceClient(conn)
	conn.Connect()
}

func (c *client) builderName(t *testing.T) string {
	t.Helper()
	if c.name == "" {
		t.Fatal("client not dialled through a test builder")
	}
	return c.name
}

func serviceConfig(name, config string) string {
	return serviceConfigLevel(name, config, false)
}

func serviceConfigLevel(name, config string, serviceLevel bool) string {
	return fmt.Sprintf(`{"loadBalancingConfig": [{%q: {"config": %q, "serviceLevel": %t}}]}`, name, config, serviceLevel)
}

// lb is the policy's current polylb balancer.
func (c *client) lb(t *testing.T) *polylb.Balancer {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.balancers) == 0 {
		t.Fatal("the policy built no balancer")
	}
	return c.balancers[len(c.balancers)-1]
}

func (c *client) stats(t *testing.T) polylb.Stats {
	t.Helper()
	s, err := c.lb(t).Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitFor polls until cond holds (connections become READY on their own
// time), failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitReady waits until the balancer's set holds exactly the addresses and
// the policy's picker serves them all (their connections are READY).
func (c *client) waitReady(t *testing.T, addrs ...string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("set %v", addrs), func() bool {
		c.mu.Lock()
		n := len(c.balancers)
		pk, _ := c.state.Picker.(*picker)
		c.mu.Unlock()
		if n == 0 || pk == nil || len(pk.pickers) != len(addrs) {
			return false
		}
		got := map[string]bool{}
		for _, inv := range c.stats(t).Invokers {
			if pk.pickers[inv.ID] != nil {
				got[inv.Address] = true
			}
		}
		if len(got) != len(addrs) {
			return false
		}
		for _, a := range addrs {
			if !got[a] {
				return false
			}
		}
		return true
	})
}

// byAddress is the stats of the invoker at addr (zero stats if absent).
func byAddress(s polylb.Stats, addr string) polylb.InvokerStats {
	for _, inv := range s.Invokers {
		if inv.Address == addr {
			return inv
		}
	}
	return polylb.InvokerStats{}
}

func endpointOf(addr string) resolver.Endpoint {
	return resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}}
}

func unary(ctx context.Context, c *client, code codes.Code, holdMs int32) (string, error) {
	req := &testpb.SimpleRequest{ResponseSize: holdMs}
	if code != codes.OK {
		req.ResponseStatus = &testpb.EchoStatus{Code: int32(code), Message: "asked for " + code.String()}
	}
	resp, err := c.service.UnaryCall(ctx, req)
	if err != nil {
		return "", err
	}
	return resp.Hostname, nil
}

// dealt makes n calls and returns how many each provider got.
func dealt(t *testing.T, cl *client, providers []*provider, n int) []int64 {
	t.Helper()
	before := make([]int64, len(providers))
	for i, p := range providers {
		before[i] = p.calls.Load()
	}
	for i := 0; i < n; i++ {
		if _, err := unary(context.Background(), cl, codes.OK, 0); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]int64, len(providers))
	for i, p := range providers {
		got[i] = p.calls.Load() - before[i]
	}
	return got
}

// basics are the providers under their ORCA services.
func basics(ps []*oobProvider) []*provider {
	out := make([]*provider, len(ps))
	for i, p := range ps {
		out[i] = p.provider
	}
	return out
}
