package polylbgrpc

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicegrpc "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/resolver"
	"google.golang.org/protobuf/proto"
)

// oobInterval is the report interval the tests ask for ("0.05s"). grpc-go's
// ORCA service clamps it to its minimum (30 s, as orca.Register allows no
// less from outside grpc-go), so each stream to it brings one report, sent as
// it opens: most tests read that one. The tests' own service (shortOrca)
// honours it.
const (
	oobInterval = 50 * time.Millisecond
	oobPeriod   = "0.05s"
)

// oobCounts wraps orca.RegisterOOBListener for a client's policy: the
// listeners it registers and stops, and the reports each delivers, by
// invoker id.
type oobCounts struct {
	mu         sync.Mutex
	registered map[uint64]int
	live       map[uint64]int
	reports    map[uint64]int // handed to the policy's listener (after it returned)
	intervals  []time.Duration
}

func newOOBCounts() *oobCounts {
	return &oobCounts{registered: map[uint64]int{}, live: map[uint64]int{}, reports: map[uint64]int{}}
}

type countingListener struct {
	l  orca.OOBListener
	o  *oobCounts
	id uint64
}

func (c *countingListener) OnLoadReport(r *v3orcapb.OrcaLoadReport) {
	c.l.OnLoadReport(r)
	c.o.mu.Lock()
	c.o.reports[c.id]++
	c.o.mu.Unlock()
}

func (o *oobCounts) register(sc balancer.SubConn, l orca.OOBListener, opts orca.OOBListenerOptions) func() {
	id := l.(*oobListener).id
	o.mu.Lock()
	o.registered[id]++
	o.live[id]++
	o.intervals = append(o.intervals, opts.ReportInterval)
	o.mu.Unlock()
	stop := orca.RegisterOOBListener(sc, &countingListener{l: l, o: o, id: id}, opts)
	return sync.OnceFunc(func() {
		stop()
		o.mu.Lock()
		o.live[id]--
		o.mu.Unlock()
	})
}

// counts is a snapshot: registered, live and reports of id (id 0: all ids).
func (o *oobCounts) counts(id uint64) (registered, live, reports int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.registered {
		if id == 0 || k == id {
			registered += o.registered[k]
			live += o.live[k]
			reports += o.reports[k]
		}
	}
	return
}

// oobProvider is a provider whose server also runs ORCA's out-of-band
// service, with its metrics from a recorder, counting the streams it serves
// (opened, still open), the reports it sent and the requests it received.
// Its calls send no per-call report unless the test sets the provider's cpu
// or load.
type oobProvider struct {
	*provider
	metrics         orca.ServerMetricsRecorder
	streams, active atomic.Int64
	sent            atomic.Int64
	requests        atomic.Int64 // streams whose request was read
	lastRequest     atomic.Pointer[v3orcaservicegrpc.OrcaLoadReportRequest]
}

type countingStream struct {
	grpc.ServerStream
	p *oobProvider
}

func (s countingStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		s.p.sent.Add(1)
	}
	return err
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if req, ok := m.(*v3orcaservicegrpc.OrcaLoadReportRequest); ok && err == nil {
		s.p.lastRequest.Store(proto.Clone(req).(*v3orcaservicegrpc.OrcaLoadReportRequest))
		s.p.requests.Add(1)
	}
	return err
}

// startOOBProvider serves grpc-go's own ORCA service (orca.Register).
func startOOBProvider(t *testing.T, set func(orca.ServerMetricsRecorder)) *oobProvider {
	t.Helper()
	return startOOBProviderWith(t, false, set)
}

// startOOBProviderWith serves grpc-go's ORCA service, or with short the
// tests' own, which reports at the interval asked for (20 ms at least).
func startOOBProviderWith(t *testing.T, short bool, set func(orca.ServerMetricsRecorder)) *oobProvider {
	t.Helper()
	p := &oobProvider{metrics: orca.NewServerMetricsRecorder()}
	set(p.metrics)
	count := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != v3orcaservicegrpc.OpenRcaService_StreamCoreMetrics_FullMethodName {
			return handler(srv, ss)
		}
		p.streams.Add(1)
		p.active.Add(1)
		defer p.active.Add(-1)
		return handler(srv, countingStream{ServerStream: ss, p: p})
	}
	p.provider = startProviderWith(t, func(s *grpc.Server) {
		if short {
			v3orcaservicegrpc.RegisterOpenRcaServiceServer(s, shortOrca{metrics: p.metrics})
			return
		}
		err := orca.Register(s, orca.ServiceOptions{ServerMetricsProvider: p.metrics, MinReportingInterval: oobInterval})
		if err != nil {
			t.Fatal(err)
		}
	}, grpc.ChainStreamInterceptor(count))
	return p
}

// shortOrca is an ORCA service of the tests' own that sends a report as the
// stream opens and then every interval the client asked for, 20 ms at least
// (grpc-go's takes no less than 30 s), so that a stream kept open brings
// reports within a test.
type shortOrca struct {
	v3orcaservicegrpc.UnimplementedOpenRcaServiceServer
	metrics orca.ServerMetricsRecorder
}

func (s shortOrca) StreamCoreMetrics(req *v3orcaservicegrpc.OrcaLoadReportRequest, stream v3orcaservicegrpc.OpenRcaService_StreamCoreMetricsServer) error {
	interval := max(req.GetReportInterval().AsDuration(), 20*time.Millisecond)
	for {
		m := s.metrics.ServerMetrics()
		r := &v3orcapb.OrcaLoadReport{ // -1 is unset
			CpuUtilization:         max(m.CPUUtilization, 0),
			ApplicationUtilization: max(m.AppUtilization, 0),
			RpsFractional:          max(m.QPS, 0),
			Eps:                    max(m.EPS, 0),
		}
		if err := stream.Send(r); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// oobEntry is a service config selecting the builder's policy with the
// config string and the out-of-band keys (period "" leaves it out).
func oobEntry(name, config string, enable bool, period string) string {
	entry := fmt.Sprintf(`{"config": %q, "enableOobLoadReport": %t`, config, enable)
	if period != "" {
		entry += fmt.Sprintf(`, "oobReportingPeriod": %q`, period)
	}
	return fmt.Sprintf(`{"loadBalancingConfig": [{%q: %s}]}`, name, entry+"}")
}

// dialOOB connects through a test builder with the out-of-band keys in the
// entry.
func dialOOB(t *testing.T, config string, enable bool, period string, endpoints []resolver.Endpoint) *client {
	t.Helper()
	c := newClient()
	c.connect(t, oobEntry(c.name, config, enable, period), endpoints)
	return c
}

// setConfig gives the client a new service config with the endpoints.
func (c *client) setConfig(t *testing.T, serviceConfig string, endpoints []resolver.Endpoint) {
	t.Helper()
	sc := c.resolver.CC().ParseServiceConfig(serviceConfig)
	if sc.Err != nil {
		t.Fatal(sc.Err)
	}
	c.resolver.UpdateState(resolver.State{Endpoints: endpoints, ServiceConfig: sc})
}

// balancerCount is how many balancers the policy has built.
func (c *client) balancerCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.balancers)
}

// orcaWeight is the invoker's orca weight at addr, and whether the schedule
// counts it.
func orcaWeight(t *testing.T, cl *client, addr string) (weight *float64, counted bool) {
	t.Helper()
	o, _ := byAddress(cl.stats(t), addr).Orca()
	return o.Weight, o.Counted && o.Reported
}

// threeCapacities starts the servers of TestOrcaLoadReportsDealTheCalls, the
// capacities in their out-of-band reports instead of their calls' trailers:
// 100 / (0.6 + 20/100) = 125, 100 / 0.4 = 250 (CPU only), 100 / 0.2 = 500
// (the application's utilization, not the CPU's 0.9).
func threeCapacities(t *testing.T) []*oobProvider {
	small := startOOBProvider(t, func(r orca.ServerMetricsRecorder) {
		r.SetQPS(100)
		r.SetEPS(20)
		r.SetApplicationUtilization(0.6)
	})
	medium := startOOBProvider(t, func(r orca.ServerMetricsRecorder) {
		r.SetQPS(100)
		r.SetCPUUtilization(0.4)
	})
	large := startOOBProvider(t, func(r orca.ServerMetricsRecorder) {
		r.SetQPS(100)
		r.SetCPUUtilization(0.9)
		r.SetApplicationUtilization(0.2)
	})
	return []*oobProvider{small, medium, large}
}

func endpointsOf(providers []*oobProvider) ([]resolver.Endpoint, []string) {
	var eps []resolver.Endpoint
	var addrs []string
	for _, p := range providers {
		eps = append(eps, endpointOf(p.addr))
		addrs = append(addrs, p.addr)
	}
	return eps, addrs
}

// With "enableOobLoadReport": true, orca weighs the endpoints by their
// servers' out-of-band reports alone (the calls carry none): the weights are the
// capacities the reports imply, and the calls are dealt 1 : 2 : 4. The
// weights do not change after the first reports (the next come 30 s later),
// so the stride schedule deals each 7 consecutive calls exactly 1, 2 and 4
// but for where the 700 calls start in it and a recomputation (every 20 ms)
// restarting it: ± 15 leaves room for those, and a uniform split (233 each)
// or any other proportion fails it.
func TestOOBLoadReportsDealTheCalls(t *testing.T) {
	providers := threeCapacities(t)
	eps, addrs := endpointsOf(providers)
	cl := dialOOB(t, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20", true, oobPeriod, eps)
	cl.waitReady(t, addrs...)

	want := []float64{125, 250, 500}
	waitFor(t, "the out-of-band weights counted", func() bool {
		// The schedule is recomputed on a pick, at most every orca.updateMs.
		dealt(t, cl, basics(providers), 1)
		for i, p := range providers {
			w, counted := orcaWeight(t, cl, p.addr)
			if w == nil || math.Abs(*w-want[i]) > 1e-9 || !counted {
				return false
			}
		}
		return true
	})
	got := dealt(t, cl, basics(providers), 700)
	t.Logf("%v of 700 calls", got)
	for i, w := range []float64{100, 200, 400} {
		if math.Abs(float64(got[i])-w) > 15 {
			t.Errorf("provider %d got %d of 700 calls, want %v ± 15 (capacities 125 : 250 : 500; %v)", i, got[i], w, got)
		}
	}
	s := cl.stats(t)
	for i, p := range providers {
		inv := byAddress(s, p.addr)
		o, _ := inv.Orca()
		if math.Abs(o.Share-want[i]/875) > 1e-6 {
			t.Errorf("provider %d: share %v, want %v", i, o.Share, want[i]/875)
		}
		// One listener and one stream per connection, the interval asked for.
		registered, live, reports := cl.oob.counts(inv.ID)
		if registered != 1 || live != 1 || reports < 1 {
			t.Errorf("provider %d: %d listeners registered, %d live, %d reports; want 1, 1, ≥ 1", i, registered, live, reports)
		}
		if n := p.streams.Load(); n != 1 {
			t.Errorf("provider %d served %d ORCA streams, want 1", i, n)
		}
		if req := p.lastRequest.Load(); req == nil || req.GetReportInterval().AsDuration() != oobInterval {
			t.Errorf("provider %d: request %v, want report_interval %v", i, req, oobInterval)
		}
	}
	cl.oob.mu.Lock()
	for _, d := range cl.oob.intervals {
		if d != oobInterval {
			t.Errorf("listener registered with interval %v, want %v", d, oobInterval)
		}
	}
	cl.oob.mu.Unlock()
}

// Without "enableOobLoadReport" the same servers' out-of-band reports are
// not read: no
// stream opens, no weight is set, and the calls go evenly (the configured
// weights). The positive test above gets its weights within milliseconds of
// the connections' READY; this one waits 300 ms.
func TestOOBLoadReportsOffByDefault(t *testing.T) {
	providers := threeCapacities(t)
	eps, addrs := endpointsOf(providers)
	cl := dial(t, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20", eps)
	cl.waitReady(t, addrs...)
	dealt(t, cl, basics(providers), 30)
	time.Sleep(300 * time.Millisecond)
	got := dealt(t, cl, basics(providers), 60)
	for i, p := range providers {
		if w, _ := orcaWeight(t, cl, p.addr); w != nil {
			t.Errorf("provider %d: orca weight %v without out-of-band reports", i, *w)
		}
		if n := p.streams.Load(); n != 0 {
			t.Errorf("provider %d served %d ORCA streams, want none", i, n)
		}
		if got[i] < 18 || got[i] > 22 {
			t.Errorf("provider %d got %d of 60 calls, want 20 ± 2 (equal weights; %v)", i, got[i], got)
		}
	}
	if registered, _, _ := cl.oob.counts(0); registered != 0 {
		t.Errorf("%d listeners registered with enableOobLoadReport absent", registered)
	}
}

// Under another strategy "enableOobLoadReport" registers nothing; a config
// change to orca (the same out-of-band settings) starts a listener on each
// connection (the same connections), and a change away from orca stops them:
// the servers' streams end while the connections stay up, so it is the
// policy's stop that ends them.
func TestOOBLoadReportsOnlyUnderOrca(t *testing.T) {
	providers := threeCapacities(t)[:2]
	eps, addrs := endpointsOf(providers)
	cl := dialOOB(t, "loadbalance=roundrobin", true, oobPeriod, eps)
	cl.waitReady(t, addrs...)
	dealt(t, cl, basics(providers), 20)
	time.Sleep(300 * time.Millisecond)
	for i, p := range providers {
		if n := p.streams.Load(); n != 0 {
			t.Errorf("roundrobin: provider %d served %d ORCA streams, want none", i, n)
		}
	}
	if registered, _, _ := cl.oob.counts(0); registered != 0 {
		t.Errorf("roundrobin: %d listeners registered", registered)
	}
	accepted := []int64{providers[0].lis.accepted.Load(), providers[1].lis.accepted.Load()}

	cl.setConfig(t, oobEntry(cl.name, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20", true, oobPeriod), eps)
	waitFor(t, "both out-of-band weights under orca", func() bool {
		if len(cl.stats(t).Invokers) != 2 {
			return false
		}
		for _, p := range providers {
			if w, _ := orcaWeight(t, cl, p.addr); w == nil {
				return false
			}
		}
		return true
	})
	for i, p := range providers {
		if n := p.active.Load(); n != 1 {
			t.Errorf("orca: provider %d has %d ORCA streams open, want 1", i, n)
		}
	}

	cl.setConfig(t, oobEntry(cl.name, "loadbalance=roundrobin", true, oobPeriod), eps)
	waitFor(t, "the ORCA streams to end", func() bool {
		return providers[0].active.Load() == 0 && providers[1].active.Load() == 0
	})
	if _, live, _ := cl.oob.counts(0); live != 0 {
		t.Errorf("roundrobin again: %d listeners still registered", live)
	}
	dealt(t, cl, basics(providers), 10)
	sameConnections(t, providers, accepted)
}

// A config change follows the Java policy's rules, against servers that
// report at the interval asked for (shortOrca): turning
// "enableOobLoadReport" on opens one stream per connection; another config
// string with the same out-of-band settings builds a new balancer and keeps
// the streams, whose next reports weigh it; another period opens them again
// asking for it (a stream's request is final) and ends the old ones; turning
// it off ends them, on the same connections.
func TestOOBConfigChangesKeepOrReopenTheStreams(t *testing.T) {
	var providers []*oobProvider
	for _, cpu := range []float64{0.5, 0.25} { // capacities 200 and 400
		providers = append(providers, startOOBProviderWith(t, true, func(r orca.ServerMetricsRecorder) {
			r.SetQPS(100)
			r.SetCPUUtilization(cpu)
		}))
	}
	eps, addrs := endpointsOf(providers)
	const config = "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20"
	cl := dialOOB(t, config, false, oobPeriod, eps)
	cl.waitReady(t, addrs...)
	accepted := []int64{providers[0].lis.accepted.Load(), providers[1].lis.accepted.Load()}
	if n := providers[0].streams.Load() + providers[1].streams.Load(); n != 0 {
		t.Fatalf("%d ORCA streams with enableOobLoadReport false", n)
	}
	weighed := func() bool {
		if len(cl.stats(t).Invokers) != 2 {
			return false
		}
		for i, want := range []float64{200, 400} {
			if w, _ := orcaWeight(t, cl, providers[i].addr); w == nil || math.Abs(*w-want) > 1e-9 {
				return false
			}
		}
		return true
	}
	streams := func(opened, open, requests int64) func() bool {
		return func() bool {
			for _, p := range providers {
				if p.streams.Load() != opened || p.active.Load() != open || p.requests.Load() != requests {
					return false
				}
			}
			return true
		}
	}

	// On, the same config string: a new balancer (any change of the entry
	// builds one), and a stream per connection.
	cl.setConfig(t, oobEntry(cl.name, config, true, oobPeriod), eps)
	waitFor(t, "a stream per connection and the weights", func() bool {
		return cl.balancerCount() == 2 && streams(1, 1, 1)() && weighed()
	})

	// Another config string, the same settings: a new balancer, weighed by
	// the streams' next reports (the first came before it).
	cl.setConfig(t, oobEntry(cl.name, config+"&orca.errorPenalty=1", true, oobPeriod), eps)
	waitFor(t, "the new balancer's weights", func() bool { return cl.balancerCount() == 3 && weighed() })
	if !streams(1, 1, 1)() {
		t.Errorf("the same settings: streams %d, %d served, %d, %d open; want the first ones kept",
			providers[0].streams.Load(), providers[1].streams.Load(), providers[0].active.Load(), providers[1].active.Load())
	}
	if registered, live, _ := cl.oob.counts(0); registered != 2 || live != 2 {
		t.Errorf("the same settings: %d listeners registered, %d live; want 2, 2", registered, live)
	}

	// Another period: the streams open again asking for it, the old ones end.
	cl.setConfig(t, oobEntry(cl.name, config+"&orca.errorPenalty=1", true, "0.1s"), eps)
	waitFor(t, "a second stream per connection, the first ended", streams(2, 1, 2))
	waitFor(t, "the new balancer's weights", func() bool { return cl.balancerCount() == 4 && weighed() })
	for i, p := range providers {
		if d := p.lastRequest.Load().GetReportInterval().AsDuration(); d != 100*time.Millisecond {
			t.Errorf("provider %d: the new stream asked for %v, want 100ms", i, d)
		}
	}
	if registered, live, _ := cl.oob.counts(0); registered != 4 || live != 2 {
		t.Errorf("a new period: %d listeners registered, %d live; want 4, 2", registered, live)
	}

	// Off: the streams end; the connections stay.
	cl.setConfig(t, oobEntry(cl.name, config, false, "0.1s"), eps)
	waitFor(t, "the streams to end", streams(2, 0, 2))
	if _, live, _ := cl.oob.counts(0); live != 0 {
		t.Errorf("off: %d listeners still registered", live)
	}
	dealt(t, cl, basics(providers), 10)
	sameConnections(t, providers, accepted)
}

// With out-of-band reports on, the calls' trailers no longer feed orca (as
// in gRPC's weighted_round_robin): servers whose calls report the opposite
// capacities (500, 250, 125 per trailer; 125, 250, 500 out of band) keep the
// out-of-band weights through 300 calls, and their calls go 1 : 2 : 4. The
// same config with "enableOobLoadReport": false makes a balancer the
// trailers weigh: 500, 250, 125, and the calls go 4 : 2 : 1.
func TestOOBReportsOverrideTheTrailers(t *testing.T) {
	providers := threeCapacities(t)
	for i, cpu := range []float64{0.2, 0.4, 0.8} {
		providers[i].load.Store(&serverLoad{qps: 100})
		providers[i].cpu.Store(math.Float64bits(cpu))
	}
	eps, addrs := endpointsOf(providers)
	const config = "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20"
	cl := dialOOB(t, config, true, oobPeriod, eps)
	cl.waitReady(t, addrs...)
	weights := func(want []float64) func() bool {
		return func() bool {
			for i, p := range providers {
				w, counted := orcaWeight(t, cl, p.addr)
				if w == nil || math.Abs(*w-want[i]) > 1e-9 || !counted {
					return false
				}
			}
			return true
		}
	}
	oob, trailers := []float64{125, 250, 500}, []float64{500, 250, 125}
	waitFor(t, "the out-of-band weights", func() bool {
		dealt(t, cl, basics(providers), 1)
		return weights(oob)()
	})
	dealt(t, cl, basics(providers), 300) // each with a trailer
	if !weights(oob)() {
		var got []string
		for _, p := range providers {
			w, _ := orcaWeight(t, cl, p.addr)
			if w == nil {
				got = append(got, "none")
			} else {
				got = append(got, fmt.Sprint(*w))
			}
		}
		t.Errorf("after 300 calls with trailers: weights %v, want the out-of-band %v", got, oob)
	}
	got := dealt(t, cl, basics(providers), 700)
	t.Logf("out of band: %v of 700 calls", got)
	for i, w := range []float64{100, 200, 400} {
		if math.Abs(float64(got[i])-w) > 15 {
			t.Errorf("provider %d got %d of 700 calls, want %v ± 15 (%v)", i, got[i], w, got)
		}
	}

	cl.setConfig(t, oobEntry(cl.name, config, false, oobPeriod), eps)
	waitFor(t, "the trailers' weights", func() bool {
		dealt(t, cl, basics(providers), 1)
		return cl.balancerCount() == 2 && weights(trailers)()
	})
	got = dealt(t, cl, basics(providers), 700)
	t.Logf("trailers: %v of 700 calls", got)
	for i, w := range []float64{400, 200, 100} {
		if math.Abs(float64(got[i])-w) > 15 {
			t.Errorf("trailers: provider %d got %d of 700 calls, want %v ± 15 (%v)", i, got[i], w, got)
		}
	}
}

// "oobReportingPeriod" is what the listener asks for: absent, A58's 10 s;
// "0s", no interval. grpc-go's listener sends report_interval 0s then (it
// cannot leave the field out), which grpc-go's service reads as its minimum:
// the first report comes as the stream opens and weighs the endpoint.
func TestOOBReportingPeriodDefaultAndZero(t *testing.T) {
	for _, tc := range []struct {
		period string
		want   time.Duration
	}{{"", 10 * time.Second}, {"0s", 0}} {
		p := startOOBProvider(t, func(r orca.ServerMetricsRecorder) {
			r.SetQPS(100)
			r.SetCPUUtilization(0.4)
		})
		cl := dialOOB(t, "loadbalance=orca&orca.blackoutMs=0", true, tc.period, []resolver.Endpoint{endpointOf(p.addr)})
		cl.waitReady(t, p.addr)
		waitFor(t, "the out-of-band weight", func() bool {
			w, _ := orcaWeight(t, cl, p.addr)
			return w != nil && math.Abs(*w-250) < 1e-9 && p.requests.Load() == 1
		})
		cl.oob.mu.Lock()
		if !slices.Equal(cl.oob.intervals, []time.Duration{tc.want}) {
			t.Errorf("period %q: listeners registered with %v, want [%v]", tc.period, cl.oob.intervals, tc.want)
		}
		cl.oob.mu.Unlock()
		req := p.lastRequest.Load()
		if req.GetReportInterval() == nil || req.GetReportInterval().AsDuration() != tc.want {
			t.Errorf("period %q: the server received %v, want report_interval %v", tc.period, req, tc.want)
		}
	}
}

// An endpoint the resolver drops takes its listener along, the others' keep
// theirs (their streams not reopened); closing the ClientConn stops the rest,
// and no ORCA producer goroutine outlives it.
func TestOOBListenersStopWithTheirEndpointAndTheClient(t *testing.T) {
	providers := threeCapacities(t)[:2]
	eps, addrs := endpointsOf(providers)
	cl := dialOOB(t, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20", true, oobPeriod, eps)
	cl.waitReady(t, addrs...)
	waitFor(t, "a stream to each server", func() bool {
		return providers[0].active.Load() == 1 && providers[1].active.Load() == 1
	})
	s := cl.stats(t)
	kept, dropped := byAddress(s, addrs[0]).ID, byAddress(s, addrs[1]).ID

	cl.resolver.UpdateState(resolver.State{Endpoints: eps[:1]})
	waitFor(t, "the dropped endpoint's listener to stop", func() bool {
		_, live, _ := cl.oob.counts(dropped)
		return live == 0 && providers[1].active.Load() == 0
	})
	if registered, live, _ := cl.oob.counts(kept); registered != 1 || live != 1 {
		t.Errorf("kept endpoint: %d listeners registered, %d live; want 1, 1", registered, live)
	}
	if n, open := providers[0].streams.Load(), providers[0].active.Load(); n != 1 || open != 1 {
		t.Errorf("kept endpoint's server: %d streams served, %d open; want 1, 1", n, open)
	}

	if err := cl.conn.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every listener stopped and stream ended", func() bool {
		_, live, _ := cl.oob.counts(0)
		return live == 0 && providers[0].active.Load() == 0
	})
	waitFor(t, "no ORCA producer goroutine", func() bool {
		var b strings.Builder
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		return !strings.Contains(b.String(), "grpc/orca.(*producer).run")
	})
}

// A report the library refuses (eps above qps) is dropped, as in the per-call
// path: its endpoint gets no weight, the other endpoint's report counts, and
// calls go on.
func TestOOBRefusedReportIsDropped(t *testing.T) {
	bad := startOOBProvider(t, func(r orca.ServerMetricsRecorder) {
		r.SetQPS(10)
		r.SetEPS(20)
		r.SetCPUUtilization(0.5)
	})
	good := threeCapacities(t)[1]
	providers := []*oobProvider{bad, good}
	eps, addrs := endpointsOf(providers)
	cl := dialOOB(t, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20", true, oobPeriod, eps)
	cl.waitReady(t, addrs...)
	badID := byAddress(cl.stats(t), bad.addr).ID
	waitFor(t, "both reports delivered", func() bool {
		_, _, reports := cl.oob.counts(badID)
		w, _ := orcaWeight(t, cl, good.addr)
		return reports >= 1 && w != nil
	})
	if w, _ := orcaWeight(t, cl, bad.addr); w != nil {
		t.Errorf("refused report gave weight %v", *w)
	}
	if got := dealt(t, cl, basics(providers), 20); got[0]+got[1] != 20 {
		t.Errorf("calls dealt %v", got)
	}
}

// The entry's out-of-band keys are read as the Java policy reads them:
// "enableOobLoadReport" a boolean (false when absent), "oobReportingPeriod" a
// duration as gRPC's service configs write them (whole seconds up to 9
// digits, up to 9 decimals, an "s"; "10s" when absent), under any strategy.
func TestOOBConfigKeys(t *testing.T) {
	parse := func(entry string) (*Config, error) {
		cfg, err := builder{}.ParseConfig(json.RawMessage(entry))
		if err != nil {
			return nil, err
		}
		return cfg.(*Config), nil
	}
	for _, tc := range []struct {
		entry  string
		enable bool
		period time.Duration
	}{
		{`{}`, false, 10 * time.Second},
		{`{"config": "loadbalance=orca", "enableOobLoadReport": true}`, true, 10 * time.Second},
		{`{"enableOobLoadReport": false, "oobReportingPeriod": "5s"}`, false, 5 * time.Second},
		{`{"config": "loadbalance=p2c", "enableOobLoadReport": true, "oobReportingPeriod": "1s"}`, true, time.Second},
		{`{"oobReportingPeriod": "0s"}`, false, 0},
		{`{"oobReportingPeriod": "0.5s"}`, false, 500 * time.Millisecond},
		{`{"oobReportingPeriod": "0.050s"}`, false, 50 * time.Millisecond},
		{`{"oobReportingPeriod": "1.000000001s"}`, false, time.Second + 1},
		{`{"oobReportingPeriod": "000000010s"}`, false, 10 * time.Second},
		{`{"oobReportingPeriod": "999999999.999999999s"}`, false, 999999999*time.Second + 999999999},
		{`{"oobReportingPeriod": "\u0031s"}`, false, time.Second}, // JSON's escapes are read first
	} {
		cfg, err := parse(tc.entry)
		if err != nil {
			t.Errorf("%s: %v", tc.entry, err)
			continue
		}
		if cfg.EnableOOBLoadReport != tc.enable || cfg.OOBReportingPeriod != tc.period {
			t.Errorf("%s: enableOobLoadReport %v, oobReportingPeriod %v; want %v, %v",
				tc.entry, cfg.EnableOOBLoadReport, cfg.OOBReportingPeriod, tc.enable, tc.period)
		}
	}
	for _, entry := range []string{
		`{"oobReportingPeriod": "-1s"}`,
		`{"oobReportingPeriod": "10"}`,
		`{"oobReportingPeriod": "1.5"}`,
		`{"oobReportingPeriod": "10ms"}`,
		`{"oobReportingPeriod": "1m"}`,
		`{"oobReportingPeriod": "1.0000000001s"}`, // 10 decimals
		`{"oobReportingPeriod": "1000000000s"}`,   // 10 digits
		`{"oobReportingPeriod": ".5s"}`,
		`{"oobReportingPeriod": "5.s"}`,
		`{"oobReportingPeriod": " 10s"}`,
		`{"oobReportingPeriod": "10s "}`,
		`{"oobReportingPeriod": "1e1s"}`,
		`{"oobReportingPeriod": "+1s"}`,
		`{"oobReportingPeriod": ""}`,
		`{"oobReportingPeriod": 10}`,
		`{"oobReportingPeriod": true}`,
		`{"oobReportingPeriod": null}`,
		`{"oobReportingPeriod": {"seconds": 10}}`,
		`{"enableOobLoadReport": "true"}`,
		`{"enableOobLoadReport": 1}`,
		`{"enableOobLoadReport": null}`,
	} {
		cfg, err := parse(entry)
		if err == nil {
			t.Errorf("%s: accepted as %+v, want an error", entry, *cfg)
			continue
		}
		key := "oobReportingPeriod"
		if strings.Contains(entry, "enableOobLoadReport") {
			key = "enableOobLoadReport"
		}
		if !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %q does not name %s", entry, err, key)
		}
	}

	// null is refused for every key, as in the Java policy.
	for _, key := range []string{"config", "serviceLevel", "enableOobLoadReport", "oobReportingPeriod"} {
		entry := `{"` + key + `": null}`
		if _, err := parse(entry); err == nil || !strings.Contains(err.Error(), `"`+key+`" is null`) {
			t.Errorf("%s: want an error naming %s as null, got %v", entry, key, err)
		}
	}

	// An unknown key's error names the four keys; through grpc.NewClient it
	// is the service config's error.
	for _, entry := range []string{
		`{"config": "loadbalance=orca", "enableOOBLoadReport": true}`,
		`{"config": "loadbalance=orca", "oob_reporting_period": "10s"}`,
	} {
		_, err := grpc.NewClient("passthrough:///x",
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"polylb": `+entry+`}]}`))
		want := `(its keys are "config", "serviceLevel", "enableOobLoadReport" and "oobReportingPeriod", as spelt)`
		if err == nil || !strings.Contains(err.Error(), "unknown key") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want an unknown-key error ending %s, got %v", entry, want, err)
		}
	}
	conn, err := grpc.NewClient("passthrough:///x",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"polylb": {"config": "loadbalance=orca",
			"serviceLevel": true, "enableOobLoadReport": true, "oobReportingPeriod": "30s"}}]}`))
	if err != nil {
		t.Fatalf("the four keys as spelt: %v", err)
	}
	conn.Close()
}

// sameConnections checks that each provider has accepted no connection since
// its count was accepted[i]: the streams ended by the policy's stop, not by a
// connection's teardown.
func sameConnections(t *testing.T, providers []*oobProvider, accepted []int64) {
	t.Helper()
	for i, p := range providers {
		if n := p.lis.accepted.Load(); n != accepted[i] {
			t.Errorf("provider %d accepted %d connections, had %d: the connection was replaced", i, n, accepted[i])
		}
	}
}
