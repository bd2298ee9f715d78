package polylb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// timeoutError is a net.Error whose Timeout() is as given.
type timeoutError bool

func (e timeoutError) Error() string   { return "i/o" }
func (e timeoutError) Timeout() bool   { return bool(e) }
func (e timeoutError) Temporary() bool { return false }

func TestOutcomeOfStandardErrors(t *testing.T) {
	expired, cancelExpired := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancelExpired()
	<-expired.Done()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	cases := []struct {
		name string
		err  error
		want polylb.Outcome
	}{
		{"nil", nil, polylb.Success},
		{"context deadline", expired.Err(), polylb.Timeout},
		{"wrapped context deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), polylb.Timeout},
		{"os deadline (net.Conn SetDeadline)", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), polylb.Timeout},
		// url.Error's own Timeout() looks at its direct Err only: false here.
		{"os deadline under url.Error and a wrap", &url.Error{Op: "Get", URL: "http://p", Err: fmt.Errorf("read body: %w", os.ErrDeadlineExceeded)}, polylb.Timeout},
		{"net.Error timeout", &net.OpError{Op: "dial", Err: timeoutError(true)}, polylb.Timeout},
		{"url.Error timeout (http.Client.Timeout)", &url.Error{Op: "Get", URL: "http://p", Err: timeoutError(true)}, polylb.Timeout},
		{"context cancel", cancelled.Err(), polylb.Cancelled},
		{"wrapped context cancel", fmt.Errorf("call: %w", context.Canceled), polylb.Cancelled},
		{"net.Error, no timeout", &net.OpError{Op: "dial", Err: timeoutError(false)}, polylb.Failure},
		{"connection refused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, polylb.Failure},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), polylb.Failure},
		{"unexpected EOF", io.ErrUnexpectedEOF, polylb.Failure},
		{"other", errors.New("boom"), polylb.Failure},
		// Any error of the tree whose Timeout() is true, also past one whose
		// Timeout() is false (errors.As stops at the first with the method).
		{"joined, the first without Timeout", errors.Join(errors.New("boom"), timeoutError(true)), polylb.Timeout},
		{"joined, the first not a timeout", errors.Join(timeoutError(false), timeoutError(true)), polylb.Timeout},
		// url.Error's Timeout() looks one level down: false over a middleware's wrap.
		{"a timeout under a wrap in url.Error", &url.Error{Op: "Get", URL: "http://p", Err: fmt.Errorf("retry: %w", &net.OpError{Op: "read", Err: timeoutError(true)})}, polylb.Timeout},
		// A timeout anywhere in a joined error wins over a cancel beside it,
		// whichever kind of timeout it is (Python reads a group in this order).
		{"joined deadline and cancel", errors.Join(context.Canceled, context.DeadlineExceeded), polylb.Timeout},
		{"joined net timeout and cancel", errors.Join(context.Canceled, &net.OpError{Op: "read", Err: timeoutError(true)}), polylb.Timeout},
		{"joined cancel and failure", errors.Join(io.EOF, context.Canceled), polylb.Cancelled},
		{"joined in a wrap", fmt.Errorf("call: %w", errors.Join(nil, io.EOF, fmt.Errorf("x: %w", timeoutError(true)))), polylb.Timeout},
		{"two wrapped", fmt.Errorf("%w and %w", io.EOF, &net.OpError{Op: "read", Err: timeoutError(true)}), polylb.Timeout},
		{"an As method giving a timeout", asTimeout{timeoutError(true)}, polylb.Timeout},
		{"an As method giving none", asTimeout{nil}, polylb.Failure},
		{"an As method giving one that is not", fmt.Errorf("w: %w", asTimeout{timeoutError(false)}), polylb.Failure},
	}
	for _, c := range cases {
		if got := polylb.OutcomeOf(c.err); got != c.want {
			t.Errorf("%s: OutcomeOf(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
		// Beside a plain walk of the tree, errors.As at each error.
		deadline := errors.Is(c.err, context.DeadlineExceeded) || errors.Is(c.err, os.ErrDeadlineExceeded)
		if c.want != polylb.Success && c.want != polylb.Cancelled && !deadline &&
			anyTimeout(c.err) != (c.want == polylb.Timeout) {
			t.Errorf("%s: the tree has a timeout: %v, the case wants %v", c.name, anyTimeout(c.err), c.want)
		}
	}
}

// anyTimeout: some error of err's tree, as errors.As finds it at that error,
// has a Timeout() that is true.
func anyTimeout(err error) bool {
	if err == nil {
		return false
	}
	var t interface{ Timeout() bool }
	if x, ok := err.(interface{ Timeout() bool }); ok && x.Timeout() {
		return true
	}
	if x, ok := err.(interface{ As(any) bool }); ok && x.As(&t) && t.Timeout() {
		return true
	}
	switch x := err.(type) {
	case interface{ Unwrap() error }:
		return anyTimeout(x.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			if anyTimeout(e) {
				return true
			}
		}
	}
	return false
}

// asTimeout fills an errors.As target for a Timeout() error with its own
// (when it has one), without being one itself.
type asTimeout struct{ inner error }

func (e asTimeout) Error() string { return "as" }

func (e asTimeout) As(target any) bool {
	t, ok := target.(*interface{ Timeout() bool })
	if !ok || e.inner == nil {
		return false
	}
	*t = e.inner.(interface{ Timeout() bool })
	return true
}

// Reading a failed call's outcome allocates nothing (errors.As's target did,
// once per failed call); an error whose As method is called still may.
func TestOutcomeOfDoesNotAllocate(t *testing.T) {
	for _, err := range []error{
		errors.New("connection reset"),
		fmt.Errorf("read: %w", syscall.ECONNRESET),
		&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		&url.Error{Op: "Get", URL: "http://p", Err: timeoutError(true)},
		errors.Join(io.EOF, timeoutError(false)),
	} {
		if allocs := testing.AllocsPerRun(1000, func() { _ = polylb.OutcomeOf(err) }); allocs != 0 {
			t.Errorf("OutcomeOf(%v): %v allocations, want 0", err, allocs)
		}
	}
}

// A real dial to a port nobody listens on, and a real read past its deadline.
func TestOutcomeOfRealNetworkErrors(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()

	conn, err := net.Dial("tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, readErr := conn.Read(make([]byte, 1))
	if got := polylb.OutcomeOf(readErr); got != polylb.Timeout {
		t.Errorf("read past its deadline: OutcomeOf(%v) = %v, want Timeout", readErr, got)
	}

	listener.Close()
	_, dialErr := net.Dial("tcp", address)
	if dialErr == nil {
		t.Skip("the closed port accepted a connection")
	}
	if got := polylb.OutcomeOf(dialErr); got != polylb.Failure {
		t.Errorf("refused dial: OutcomeOf(%v) = %v, want Failure", dialErr, got)
	}
}

// OutcomeOf after a call: the provider's own errors are told apart first.
func ExampleOutcomeOf() {
	errNotFound := errors.New("user not found") // the service's answer
	for _, err := range []error{
		nil,
		errNotFound,
		fmt.Errorf("call: %w", context.DeadlineExceeded),
		context.Canceled,
		errors.New("connection reset by peer"),
	} {
		outcome := polylb.OutcomeOf(err)
		if errors.Is(err, errNotFound) {
			outcome = polylb.Success // the provider answered
		}
		fmt.Println(outcome)
	}
	// Output:
	// Success
	// Success
	// Timeout
	// Cancelled
	// Failure
}

func TestOutcomeNames(t *testing.T) {
	for outcome, want := range map[polylb.Outcome]string{
		polylb.Success: "Success", polylb.Failure: "Failure", polylb.Timeout: "Timeout",
		polylb.Cancelled: "Cancelled", polylb.Outcome(7): "Outcome(7)",
	} {
		if got := outcome.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int32(outcome), got, want)
		}
	}
}
