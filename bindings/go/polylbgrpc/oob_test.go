package polylbgrpc

import (
	"context"
	"math"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicegrpc "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/resolver"
)

// oobInterval is the report interval the tests ask for. The ORCA service
// clamps it to its minimum (30 s, as orca.Register allows no less from
// outside grpc-go), so each stream brings one report, sent as it opens: the
// tests read that one.
const oobInterval = 50 * time.Millisecond

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
// (opened, still open) and the reports it sent. Its calls send no per-call
// report (the provider's cpu and load stay unset).
type oobProvider struct {
	*provider
	metrics         orca.ServerMetricsRecorder
	streams, active atomic.Int64
	sent            atomic.Int64
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

func startOOBProvider(t *testing.T, set func(orca.ServerMetricsRecorder)) *oobProvider {
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
		err := orca.Register(s, orca.ServiceOptions{ServerMetricsProvider: p.metrics, MinReportingInterval: oobInterval})
		if err != nil {
			t.Fatal(err)
		}
	}, grpc.ChainStreamInterceptor(count))
	return p
}

// dialOOB connects through a builder with the options.
func dialOOB(t *testing.T, config string, opts Options, endpoints []resolver.Endpoint) *client {
	t.Helper()
	c := newClientWith(opts)
	c.connect(t, serviceConfig(c.name, config), endpoints)
	return c
}

// dealt makes n calls and returns how many each provider got.
func dealt(t *testing.T, cl *client, providers []*oobProvider, n int) []int64 {
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

// With OOBLoadReportInterval, orca weighs the endpoints by their servers'
// out-of-band reports alone (the calls carry none): the weights are the
// capacities the reports imply, and the calls are dealt 1 : 2 : 4. The
// weights do not change after the first reports (the next come 30 s later),
// so the stride schedule deals each 7 consecutive calls exactly 1, 2 and 4
// but for where the 700 calls start in it and a recomputation (every 20 ms)
// restarting it: ± 15 leaves room for those, and a uniform split (233 each)
// or any other proportion fails it.
func TestOOBLoadReportsDealTheCalls(t *testing.T) {
	providers := threeCapacities(t)
	eps, addrs := endpointsOf(providers)
	cl := dialOOB(t, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20",
		Options{OOBLoadReportInterval: oobInterval}, eps)
	cl.waitReady(t, addrs...)

	want := []float64{125, 250, 500}
	waitFor(t, "the out-of-band weights counted", func() bool {
		// The schedule is recomputed on a pick, at most every orca.updateMs.
		dealt(t, cl, providers, 1)
		for i, p := range providers {
			w, counted := orcaWeight(t, cl, p.addr)
			if w == nil || math.Abs(*w-want[i]) > 1e-9 || !counted {
				return false
			}
		}
		return true
	})
	got := dealt(t, cl, providers, 700)
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
	}
	cl.oob.mu.Lock()
	for _, d := range cl.oob.intervals {
		if d != oobInterval {
			t.Errorf("listener registered with interval %v, want %v", d, oobInterval)
		}
	}
	cl.oob.mu.Unlock()
}

// Without the option the same servers' out-of-band reports are not read: no
// stream opens, no weight is set, and the calls go evenly (the configured
// weights). The positive test above gets its weights within milliseconds of
// the connections' READY; this one waits 300 ms.
func TestOOBLoadReportsOffByDefault(t *testing.T) {
	providers := threeCapacities(t)
	eps, addrs := endpointsOf(providers)
	cl := dialOOB(t, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20", Options{}, eps)
	cl.waitReady(t, addrs...)
	dealt(t, cl, providers, 30)
	time.Sleep(300 * time.Millisecond)
	got := dealt(t, cl, providers, 60)
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
		t.Errorf("%d listeners registered with the option off", registered)
	}
}

// Under another strategy the option registers nothing; a config change to
// orca starts a listener on each connection (the same connections), another
// orca config restarts them for its new balancer, and a change away from
// orca stops them: the servers' streams end while the connections
// stay up, so it is the policy's stop that ends them.
func TestOOBLoadReportsOnlyUnderOrca(t *testing.T) {
	providers := threeCapacities(t)[:2]
	eps, addrs := endpointsOf(providers)
	cl := dialOOB(t, "loadbalance=roundrobin", Options{OOBLoadReportInterval: oobInterval}, eps)
	cl.waitReady(t, addrs...)
	dealt(t, cl, providers, 20)
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

	setConfig := func(config string) {
		sc := cl.resolver.CC().ParseServiceConfig(serviceConfig(cl.name, config))
		cl.resolver.UpdateState(resolver.State{Endpoints: eps, ServiceConfig: sc})
	}
	weighed := func() bool {
		if len(cl.stats(t).Invokers) != 2 {
			return false
		}
		for _, p := range providers {
			if w, _ := orcaWeight(t, cl, p.addr); w == nil {
				return false
			}
		}
		return true
	}
	setConfig("loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20")
	waitFor(t, "both out-of-band weights under orca", weighed)
	for i, p := range providers {
		if n := p.active.Load(); n != 1 {
			t.Errorf("orca: provider %d has %d ORCA streams open, want 1", i, n)
		}
	}

	// Another orca config: a new balancer, without weights. The streams are
	// opened anew for it, so the servers' first reports (the next would come
	// 30 s later) give it its weights at once.
	setConfig("loadbalance=orca&orca.blackoutMs=0&orca.updateMs=25")
	waitFor(t, "the new balancer's weights, from a second stream to each server (the first ended)", func() bool {
		cl.mu.Lock()
		n := len(cl.balancers)
		cl.mu.Unlock()
		for _, p := range providers {
			if p.streams.Load() != 2 || p.active.Load() != 1 {
				return false
			}
		}
		return n == 3 && weighed()
	})

	setConfig("loadbalance=roundrobin")
	waitFor(t, "the ORCA streams to end", func() bool {
		return providers[0].active.Load() == 0 && providers[1].active.Load() == 0
	})
	if _, live, _ := cl.oob.counts(0); live != 0 {
		t.Errorf("roundrobin again: %d listeners still registered", live)
	}
	dealt(t, cl, providers, 10)
	for i, p := range providers {
		if n := p.lis.accepted.Load(); n != accepted[i] {
			t.Errorf("provider %d accepted %d connections, had %d: the connection was replaced", i, n, accepted[i])
		}
	}
}

// An endpoint the resolver drops takes its listener along, the others' keep
// theirs (their streams not reopened); closing the ClientConn stops the rest,
// and no ORCA producer goroutine outlives it.
func TestOOBListenersStopWithTheirEndpointAndTheClient(t *testing.T) {
	providers := threeCapacities(t)[:2]
	eps, addrs := endpointsOf(providers)
	cl := dialOOB(t, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20",
		Options{OOBLoadReportInterval: oobInterval}, eps)
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
	cl := dialOOB(t, "loadbalance=orca&orca.blackoutMs=0&orca.updateMs=20",
		Options{OOBLoadReportInterval: oobInterval}, eps)
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
	if got := dealt(t, cl, providers, 20); got[0]+got[1] != 20 {
		t.Errorf("calls dealt %v", got)
	}
}
