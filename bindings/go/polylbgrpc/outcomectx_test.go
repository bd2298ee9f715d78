package polylbgrpc

import (
	"context"
	"testing"

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// OutcomeOf's documented context is the one the RPC was started with:
// grpc-go cancels a stream's stream.Context() when the stream ends, so with
// that one a server's CANCELLED reads as this side's cancel.
func TestOutcomeOfTakesTheRPCsContextNotTheStreams(t *testing.T) {
	a := startProvider(t)
	cl := dial(t, "loadbalance=roundrobin", []resolver.Endpoint{endpointOf(a.addr)})
	cl.waitReady(t, a.addr)
	rpcCtx := context.Background()
	stream, err := cl.service.StreamingOutputCall(rpcCtx, &testpb.StreamingOutputCallRequest{
		ResponseStatus: &testpb.EchoStatus{Code: int32(codes.Canceled)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	close(a.release) // the server ends the stream with CANCELLED
	if _, err = stream.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("want the server's CANCELLED, got %v", err)
	}
	if got := OutcomeOf(rpcCtx, err); got != polylb.Failure {
		t.Errorf("OutcomeOf(the RPC's context) = %v, want Failure", got)
	}
	// What the documentation warns of: the stream's own context is cancelled.
	if got := OutcomeOf(stream.Context(), err); got != polylb.Cancelled {
		t.Errorf("OutcomeOf(stream.Context()) = %v: grpc-go no longer cancels it at the stream's end; revise OutcomeOf's documentation", got)
	}
	// The policy itself reads the end as the provider's failure.
	waitFor(t, "the stream reported", func() bool { return byAddress(cl.stats(t), a.addr).Active == 0 })
	if s := byAddress(cl.stats(t), a.addr); s.Failures != 1 {
		t.Errorf("policy: %+v, want one failure", s)
	}
}
