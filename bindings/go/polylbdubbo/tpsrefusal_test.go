package polylbdubbo

import (
	"context"
	"testing"

	"dubbo.apache.org/dubbo-go/v3/protocol/result"
	hessian "github.com/apache/dubbo-go-hessian2"
	"github.com/apache/dubbo-go-hessian2/java_exception"

	polylb "github.com/polylb/polylb/bindings/go"
)

// javaRpcException has the fields of Java's org.apache.dubbo.rpc.RpcException as
// hessian2 writes them (Throwable's four and the code).
type javaRpcException struct {
	SerialVersionUID     int64
	DetailMessage        string
	SuppressedExceptions []java_exception.Throwabler
	StackTrace           []java_exception.StackTraceElement
	Cause                java_exception.Throwabler
	Code                 int32
}

func (javaRpcException) JavaClassName() string { return "org.apache.dubbo.rpc.RpcException" }

// A Java provider (Dubbo 3.2 on) over its tps limit answers with its
// TpsLimitFilter's RpcException as the response's exception, which hessian2
// decodes as an unknown Java exception: load shedding, a Failure, not the
// service's answer (docs/outcomes.md).
func TestAJavaProvidersTpsRefusalIsAFailure(t *testing.T) {
	e := hessian.NewEncoder()
	if err := e.Encode(javaRpcException{DetailMessage: "Failed to invoke service x.Y.m because exceed max service tps."}); err != nil {
		t.Fatal(err)
	}
	hessian.UnRegisterPOJOs(javaRpcException{})
	v, err := hessian.NewDecoder(e.Buffer()).Decode()
	if err != nil {
		t.Fatal(err)
	}
	thrown, ok := v.(java_exception.Throwabler)
	if !ok {
		t.Fatalf("decoded %T, not a Java exception", v)
	}
	if got := OutcomeOf(context.Background(), &result.RPCResult{Err: thrown}); got != failure {
		t.Errorf("%q: %v, want Failure", thrown.Error(), got)
	}
	// Other Java exceptions stay the provider's answers.
	biz := java_exception.NewThrowable("Failed because exceed max service tps.")
	if got := OutcomeOf(context.Background(), &result.RPCResult{Err: biz}); got != polylb.Success {
		t.Errorf("a business exception: %v, want Success", got)
	}
}
