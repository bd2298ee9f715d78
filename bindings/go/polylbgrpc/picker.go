package polylbgrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lbState is one library balancer with its interned methods.
type lbState struct {
	lb           *polylb.Balancer
	serviceLevel bool
	// orca: the strategy is orca, which weighs endpoints by the ORCA load
	// reports of their calls (ReportLoad); the other strategies skip them.
	orca bool
	// oob: orca reads ORCA's out-of-band reports (oob.go), and the calls'
	// reports no more, as in gRPC's weighted_round_robin.
	oob     bool
	methods sync.Map // full method name → polylb.Method
}

func newLBState(lb *polylb.Balancer, serviceLevel bool) *lbState {
	// The strategy as the library names it (not read from the config
	// string, which the library parses): one stats call, once per balancer.
	s, err := lb.Stats()
	return &lbState{lb: lb, serviceLevel: serviceLevel, orca: err == nil && s.Strategy == "orca"}
}

// method interns the RPC's method once per balancer; past the library's
// limit on methods (1<<20) the rest share the service-level state.
func (s *lbState) method(fullName string) polylb.Method {
	if s.serviceLevel {
		return polylb.ServiceLevel
	}
	if m, ok := s.methods.Load(fullName); ok {
		return m.(polylb.Method)
	}
	m, err := s.lb.Method(fullName)
	if err != nil {
		return polylb.ServiceLevel
	}
	s.methods.Store(fullName, m)
	return m
}

// picker places RPCs over the READY endpoints: the library picks the
// invoker among the set but the endpoints not READY, the endpoint's
// pick_first child gives its connection.
type picker struct {
	lb       *lbState
	pickers  map[uint64]balancer.Picker // READY invoker id → the endpoint's child picker
	notReady []uint64                   // the set's other ids; usually none
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	method := p.lb.method(info.FullMethodName)
	var id uint64
	var err error
	if len(p.notReady) == 0 {
		id, err = p.lb.lb.Select(method, keyOf(info.Ctx))
	} else {
		id, err = p.lb.lb.SelectAmong(method, keyOf(info.Ctx), nil, p.notReady)
	}
	if errors.Is(err, polylb.ErrClosed) || errors.Is(err, polylb.ErrNoCandidate) || errors.Is(err, polylb.ErrNoProvider) {
		// A picker still in gRPC's hands for a moment after the library
		// took another set (all of it excluded here, or empty) or its
		// balancer was replaced by a new config: wait for the new picker.
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	if err != nil {
		// Not a status: gRPC would drop even a wait-for-ready RPC (see
		// keepSetLocked); it fails a fail-fast one as UNAVAILABLE.
		return balancer.PickResult{}, fmt.Errorf("polylb: %w", err)
	}
	child := p.pickers[id]
	if child == nil {
		// The library took a new set an instant before gRPC got the picker
		// over it (the two cannot change in one step): undo the select and
		// let gRPC pick again with the new picker.
		_ = p.lb.lb.Report(method, id, 0, polylb.Cancelled)
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	result, err := child.Pick(info)
	if err != nil {
		// The RPC was not sent (gRPC queues it or fails it): only the
		// in-flight count the select took is undone.
		p.lb.lb.Report(method, id, 0, polylb.Cancelled)
		return result, err
	}
	// The monotonic clock only (time.Now would read the wall clock too), and
	// as a Duration: the Done closure is 64 B instead of 80.
	start := time.Since(clockBase)
	ctx := info.Ctx
	st := p.lb // one word for the balancer and its flags: the closure stays at 64 B
	childDone := result.Done
	// gRPC calls Done once, when the RPC ends: a unary call's answer, a
	// stream's last status (a stream is one call, its latency its life).
	result.Done = func(done balancer.DoneInfo) {
		// A report after the balancer was replaced or closed is an error
		// with nothing to do about it.
		elapsed := time.Since(clockBase) - start
		lb := st.lb
		if done.ServerLoad != nil && done.BytesSent {
			// A server's ORCA load report, parsed because this package
			// imports google.golang.org/grpc/orca (a server sends one per
			// call through orca.CallMetricsServerOption).
			if st.orca {
				// With out-of-band reports on, orca reads those alone.
				if load, ok := done.ServerLoad.(loadReport); ok && !st.oob {
					// A report the library refuses (eps above qps, say) is
					// the server's mistake; the call's report below stands.
					_ = reportLoad(lb, id, load)
				}
			} else if load, ok := done.ServerLoad.(cpuReport); ok {
				// adaptive, as Dubbo's provider metrics: CPU in percent,
				// the consumer's own clock standing for the provider's
				// (reports arrive in order), the round trip measured here.
				// Other strategies ignore it. A report without CPU
				// utilization says nothing.
				if cpu := load.GetCpuUtilization(); cpu > 0 {
					_ = lb.ReportProviderMetrics(method, id, time.Now(), 100*cpu, elapsed)
				}
			}
		}
		_ = lb.Report(method, id, elapsed, doneOutcome(ctx, done))
		if childDone != nil {
			childDone(done)
		}
	}
	return result, nil
}

// clockBase is what a pick's start and end are measured from: time.Since on
// a time with a monotonic reading reads one clock.
var clockBase = time.Now()

// cpuReport is the part of an ORCA load report (xds's OrcaLoadReport, the
// type gRPC parses trailers into) the policy reads for adaptive.
type cpuReport interface{ GetCpuUtilization() float64 }

// loadReport is the part of an ORCA load report orca reads: queries and
// errors per second, and the utilizations (the application's own first).
type loadReport interface {
	GetRpsFractional() float64
	GetEps() float64
	GetApplicationUtilization() float64
	GetCpuUtilization() float64
}

// reportLoad hands an ORCA load report, a call's or an out-of-band one, to
// orca: the provider's capacity, read as gRPC's weighted_round_robin reads it
// (gRFC A58): rps_fractional as qps, eps, and application_utilization, or
// cpu_utilization when the application sets none.
func reportLoad(lb *polylb.Balancer, id uint64, load loadReport) error {
	util := load.GetApplicationUtilization()
	if util <= 0 {
		util = load.GetCpuUtilization()
	}
	return lb.ReportLoad(id, load.GetRpsFractional(), load.GetEps(), util)
}

// doneOutcome reads a pick's end. No stream was opened (BytesSent false) when
// the picked connection was no longer ready as gRPC came to use it — gRPC
// then calls Done with no error and picks again — or when opening the stream
// failed: the RPC never reached the provider, so it is cancelled, never a
// success of a few microseconds (which would make a closing connection look
// like the fastest provider to peakewma).
func doneOutcome(ctx context.Context, done balancer.DoneInfo) polylb.Outcome {
	if !done.BytesSent {
		return polylb.Cancelled
	}
	if !done.BytesReceived && (done.Err == nil || refusedByDrain(done.Err) || unsentByClient(done.Err)) {
		// The server answered nothing: refused unprocessed by its GOAWAY,
		// which gRPC retries elsewhere. The refusal reaches Done as
		// drainRefusal, or as no error at all when the attempt's send met the
		// closed stream first (its io.EOF, which the attempt's end reads as
		// a clean end); a real success always receives the server's status.
		return polylb.Cancelled
	}
	return OutcomeOf(ctx, done.Err)
}

// unsentByClient: this side's gRPC could not send the request (it could not
// encode or compress it, or it passed this side's send limit) after the
// stream opened: the provider got nothing to answer, so the call says nothing
// about it. (A provider's own such errors arrive as its status, with bytes
// received.)
func unsentByClient(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch msg := st.Message(); st.Code() {
	case codes.Internal:
		return strings.HasPrefix(msg, "grpc: error while marshaling") ||
			strings.HasPrefix(msg, "grpc: error while compressing")
	case codes.ResourceExhausted:
		return strings.HasPrefix(msg, "trying to send message larger than max")
	}
	return false
}

// tooLargeToReceive: a message over the receiver's size limit, which gRPC
// reports with these words whichever side refused it (this side refusing the
// provider's answer, or the provider refusing the request), in grpc-go's,
// grpc-java's and gRPC C-core's wording. Another provider would do the same.
func tooLargeToReceive(st *status.Status) bool {
	if st.Code() != codes.ResourceExhausted {
		return false
	}
	msg := strings.ToLower(st.Message())
	for _, words := range receiveLimitWords {
		if strings.Contains(msg, words) {
			return true
		}
	}
	return false
}

var receiveLimitWords = []string{
	"received message larger than max",                     // grpc-go, C-core
	"received message after decompression larger than max", // grpc-go
	"decompressed message larger than max",                 // C-core
	"grpc message exceeds maximum size",                    // grpc-java, also decompressed
}

// drainRefusal is grpc-go's message (transport's errStreamDrain, UNAVAILABLE)
// for a stream a server's GOAWAY refused unprocessed: the server began a
// graceful shutdown as the stream crossed it, and gRPC retries the stream
// elsewhere, transparently. The server did nothing wrong; as a failure it
// would come back from a rolling restart at the same address with a failure
// record (and, with outlier ejection, maybe ejected) for its own clean
// shutdown. gRPC gives the policy no other sign of the refusal.
const drainRefusal = "the connection is draining"

func refusedByDrain(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && st.Message() == drainRefusal
}

// OutcomeOf is the outcome to report for an RPC that ended with err, as
// docs/outcomes.md's table reads gRPC's statuses. ctx is the context the RPC
// was started with (the one passed to the stub's method, Invoke or
// NewStream), never a stream's stream.Context(): grpc-go cancels that one
// when the stream ends, whatever ended it, so with it every CANCELLED would
// read as this side's cancel. ctx tells a CANCELLED of this side's own cancel
// (no verdict on the provider: Cancelled) from one the connection or the
// server caused (a connection that closed under the call, the server
// resetting the stream or sending CANCELLED: Failure). grpc-go's CANCELLED for an RPC this side's ClientConn.Close cut
// or refused ("grpc: the client connection is closing") is a cancel too,
// though the RPC's context is not cancelled. An error that is no gRPC status
// is read by polylb.OutcomeOf.
//
//   - nil, and errors the provider answered with (INVALID_ARGUMENT, NOT_FOUND,
//     ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION,
//     ABORTED, OUT_OF_RANGE), and a message over a receiver's size limit
//     (RESOURCE_EXHAUSTED worded by gRPC's size check, "received message
//     larger than max" and the like, this side's or the provider's): Success;
//   - DEADLINE_EXCEEDED: Timeout;
//   - UNAVAILABLE, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL, UNKNOWN,
//     DATA_LOSS and any code gRPC does not define: Failure.
func OutcomeOf(ctx context.Context, err error) polylb.Outcome {
	if err == nil {
		return polylb.Success
	}
	st, ok := status.FromError(err)
	if !ok {
		return polylb.OutcomeOf(err)
	}
	switch st.Code() {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
		codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition,
		codes.Aborted, codes.OutOfRange:
		return polylb.Success
	case codes.DeadlineExceeded:
		return polylb.Timeout
	case codes.ResourceExhausted:
		if tooLargeToReceive(st) {
			return polylb.Success
		}
	case codes.Canceled:
		if ctx != nil && ctx.Err() != nil {
			return polylb.Cancelled
		}
		if strings.Contains(st.Message(), clientConnClosing) {
			return polylb.Cancelled
		}
		return polylb.Failure
	}
	return polylb.Failure
}

// clientConnClosing is the message of grpc-go's ErrClientConnClosing
// (CANCELLED), with which an RPC ends when this side closes its ClientConn
// under it (ClientConn.Close) or starts on a ClientConn already closed. The
// RPC's context is not cancelled then, yet no provider did anything: this
// side gave the call up, as with its own cancel. (A wrapped status's message
// starts with the wrapper's words: status.FromError puts err.Error() there.)
const clientConnClosing = "grpc: the client connection is closing"
