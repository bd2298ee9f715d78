package polylbgrpc

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
)

// drainingServer speaks just enough HTTP/2 to become READY, then answers the
// first stream of its first connection with a GOAWAY that says no stream was
// processed (last stream id 0): what a server beginning a graceful shutdown
// sends the streams that crossed it. Later connections are held without a
// handshake, so the endpoint is never READY again.
type drainingServer struct {
	lis     net.Listener
	streams atomic.Int64 // HEADERS frames received: streams opened on it
	mu      sync.Mutex
	conns   []net.Conn
}

func startDrainingServer(t *testing.T) *drainingServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &drainingServer{lis: lis}
	go s.serve()
	t.Cleanup(func() {
		lis.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	return s
}

func (s *drainingServer) addr() string { return s.lis.Addr().String() }

func (s *drainingServer) serve() {
	for first := true; ; first = false {
		conn, err := s.lis.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, conn)
		s.mu.Unlock()
		if first {
			go s.refuseFirstStream(conn)
		} else {
			go io.Copy(io.Discard, conn)
		}
	}
}

func (s *drainingServer) refuseFirstStream(conn net.Conn) {
	if _, err := io.ReadFull(conn, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(conn, conn)
	if fr.WriteSettings() != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			s.streams.Add(1)
			fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		}
	}
}

// A stream a draining server refused unprocessed (grpc-go retries it on
// another endpoint, transparently) says nothing against that server: no
// failure, nothing in flight. A restarted provider at the same address would
// otherwise come back with a failure record from its own graceful shutdown.
func TestAStreamRefusedByADrainingServerIsNoFailure(t *testing.T) {
	draining, healthy := startDrainingServer(t), startProvider(t)
	cl := dial(t, "loadbalance=roundrobin", []resolver.Endpoint{endpointOf(draining.addr()), endpointOf(healthy.addr)})
	cl.waitReady(t, draining.addr(), healthy.addr)
	for i := 0; i < 10 && draining.streams.Load() == 0; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := unary(ctx, cl, codes.OK, 0)
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v (a refused stream is retried on the other endpoint)", i, err)
		}
	}
	if n := draining.streams.Load(); n != 1 {
		t.Fatalf("the draining server saw %d streams, want 1", n)
	}
	waitFor(t, "no call in flight", func() bool {
		for _, inv := range cl.stats(t).Invokers {
			if inv.Active != 0 {
				return false
			}
		}
		return true
	})
	if d := byAddress(cl.stats(t), draining.addr()); d.Failures != 0 || d.Succeeded != 0 {
		t.Errorf("the draining server: %d failures, %d successes; want neither", d.Failures, d.Succeeded)
	}
}
