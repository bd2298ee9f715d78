package polylbdubbo

import (
	"context"
	"errors"
	"strings"

	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
	tri "dubbo.apache.org/dubbo-go/v3/protocol/triple/triple_protocol"
	"github.com/apache/dubbo-go-hessian2/java_exception"

	polylb "github.com/polylb/polylb/bindings/go"
)

const failure = polylb.Failure

// OutcomeOf is the outcome the filter reports for a call that ended with
// res, a verdict on the provider (docs/outcomes.md):
//
//   - no error: Success;
//   - the provider's own error is its answer, a Success: over Triple the codes
//     BizError (a Go provider's returned error), InvalidArgument, NotFound,
//     AlreadyExists, PermissionDenied, Unauthenticated, FailedPrecondition,
//     Aborted, OutOfRange; over the dubbo protocol a Java exception
//     (java_exception.Throwabler, also what a Go provider's error becomes),
//     except a Java provider's refusal for its tps limit (below);
//   - Triple DeadlineExceeded, the dubbo protocol's read timeout, and any
//     error polylb.OutcomeOf calls a timeout (context.DeadlineExceeded, a
//     Timeout() error): Timeout;
//   - Triple Canceled: Cancelled when the caller's ctx was cancelled, else a
//     Failure (the provider or the connection ended the call);
//   - a call the protocol never sent (a destroyed invoker, a closed client,
//     no reply object; over Triple a request it could not encode or compress,
//     one over its send limit, attachments it refuses or an invocation
//     without call type or method name; over the dubbo protocol a request it
//     could not encode or one over its payload limit): Cancelled;
//   - context.Canceled: Cancelled; anything else (connection refused,
//     Unavailable, Internal, Unknown, …): Failure.
func OutcomeOf(ctx context.Context, res result.Result) polylb.Outcome {
	if res == nil {
		return failure
	}
	err := res.Error()
	if err == nil {
		return polylb.Success
	}
	var te *tri.Error
	if errors.As(err, &te) {
		switch te.Code() {
		case tri.CodeBizError, tri.CodeInvalidArgument, tri.CodeNotFound, tri.CodeAlreadyExists,
			tri.CodePermissionDenied, tri.CodeUnauthenticated, tri.CodeFailedPrecondition,
			tri.CodeAborted, tri.CodeOutOfRange:
			return polylb.Success
		case tri.CodeDeadlineExceeded:
			return polylb.Timeout
		case tri.CodeInternal, tri.CodeResourceExhausted:
			if unsent(te) {
				return polylb.Cancelled
			}
			return failure
		case tri.CodeCanceled:
			if ctx != nil && errors.Is(ctx.Err(), context.Canceled) {
				return polylb.Cancelled
			}
			return failure
		default:
			return failure
		}
	}
	var thrown java_exception.Throwabler
	if errors.As(err, &thrown) {
		if shedByJavaProvider(thrown) {
			return failure
		}
		return polylb.Success
	}
	if errors.Is(err, base.ErrDestroyedInvoker) || errors.Is(err, base.ErrClientClosed) || errors.Is(err, base.ErrNoReply) {
		return polylb.Cancelled
	}
	if unsentLocally(err.Error()) {
		return polylb.Cancelled
	}
	// The getty client's read timeout is an unexported error with no
	// Timeout() method: its text is all there is to go by.
	if strings.Contains(err.Error(), "client read timeout") {
		return polylb.Timeout
	}
	return polylb.OutcomeOf(err)
}

// unsent: Triple's own refusals to send a message, made before it goes out
// (its texts are all there is to go by): the provider got nothing to answer
// (a provider's own such failure, of its answer, is as deterministic: another
// provider would fail the same way).
func unsent(te *tri.Error) bool {
	msg := te.Message()
	switch te.Code() {
	case tri.CodeInternal:
		return strings.HasPrefix(msg, "marshal message") || strings.HasPrefix(msg, "compress:")
	case tri.CodeResourceExhausted:
		return strings.Contains(msg, "exceeds sendMaxBytes")
	}
	return false
}

// unsentLocally: a request dubbo-go v3.3.1 failed on this side before writing
// anything, told by its texts (plain errors, with no type or code to go by;
// a provider's error never reaches here with one of them: over Triple it is a
// *tri.Error, over the dubbo protocol a Java exception). As failures, one
// caller's bad request, retried by a failover on every provider, put a
// failure on each (the Java adapter's isUnencodable).
//
//   - TripleInvoker: attachments that are not string or []string
//     (mergeAttachmentToOutgoing), an invocation without call type or method
//     name (parseInvocation);
//   - the dubbo protocol (its codec, in the getty client's write): arguments
//     hessian2 cannot type or encode (marshalRequest), a request over the
//     payload limit (RpcClientPackageHandler.Write).
func unsentLocally(msg string) bool {
	switch {
	case strings.HasPrefix(msg, "triple attachments value with key = ") &&
		strings.HasSuffix(msg, " is invalid, which should be string or []string"):
		return true
	case msg == "miss CallType in invocation to invoke TripleInvoker",
		msg == "miss MethodName in invocation to invoke TripleInvoker",
		strings.HasPrefix(msg, "CallType should be string, but got "):
		return true
	case strings.HasPrefix(msg, " PackRequest(args:"), // perrors.Wrapf(err, " PackRequest(args:%+v)", args)
		strings.HasPrefix(msg, "failed to encode argument: "):
		return true
	case strings.HasPrefix(msg, "Data length ") && strings.Contains(msg, " too large, max payload "):
		return true
	}
	return false
}

// tpsRefusal ends the message of a Java provider's TpsLimitFilter refusal
// (Java Dubbo 2.7 to 3.3).
const tpsRefusal = " because exceed max service tps."

// shedByJavaProvider: a Java provider (Dubbo 3.2 on) over its tps limit
// returns its refusal as the response's exception, an
// org.apache.dubbo.rpc.RpcException that hessian2 decodes as any Java
// exception: no answer of the service's but load shedding, a Failure. As a
// success, with the few microseconds of a refusal as its latency, the
// shedding provider would look the fastest of all.
func shedByJavaProvider(thrown java_exception.Throwabler) bool {
	if name := thrown.JavaClassName(); name != "" && name != "org.apache.dubbo.rpc.RpcException" {
		return false
	}
	return strings.HasSuffix(thrown.Error(), tpsRefusal)
}
