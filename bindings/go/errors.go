package polylb

/*
#include "polylb.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
)

// Status is a polylb status code (PLB_OK, PLB_ERR_*). The values are
// include/polylb.h's (checked when the package compiles); the C ABI promises
// they are never renumbered.
type Status int32

// Status codes, one per kind of failure a caller can cause.
const (
	StatusOK               Status = 0  // PLB_OK
	StatusNullPointer      Status = 1  // PLB_ERR_NULL_POINTER
	StatusInvalidUTF8      Status = 2  // PLB_ERR_INVALID_UTF8
	StatusInvalidConfig    Status = 3  // PLB_ERR_INVALID_CONFIG
	StatusNegativeWeight   Status = 4  // PLB_ERR_NEGATIVE_WEIGHT
	StatusDuplicateID      Status = 5  // PLB_ERR_DUPLICATE_ID
	StatusIDOutOfRange     Status = 6  // PLB_ERR_ID_OUT_OF_RANGE
	StatusNoProvider       Status = 7  // PLB_ERR_NO_PROVIDER
	StatusNoCandidate      Status = 8  // PLB_ERR_NO_CANDIDATE
	StatusUnknownCandidate Status = 9  // PLB_ERR_UNKNOWN_CANDIDATE
	StatusUnknownMethod    Status = 10 // PLB_ERR_UNKNOWN_METHOD
	StatusUnknownOutcome   Status = 11 // PLB_ERR_UNKNOWN_OUTCOME
	StatusBufferTooSmall   Status = 12 // PLB_ERR_BUFFER_TOO_SMALL
	StatusPanic            Status = 13 // PLB_ERR_PANIC
	StatusInvalidArgument  Status = 14 // PLB_ERR_INVALID_ARGUMENT
	StatusLimitExceeded    Status = 15 // PLB_ERR_LIMIT_EXCEEDED
)

// The Status and Outcome constants are numbers, so that go doc shows them; a
// header that numbered one otherwise would stop the build here (an index out
// of range of [1]).
func _() {
	var same [1]struct{}
	_ = same[StatusOK-C.PLB_OK]
	_ = same[C.PLB_OK-StatusOK]
	_ = same[StatusNullPointer-C.PLB_ERR_NULL_POINTER]
	_ = same[C.PLB_ERR_NULL_POINTER-StatusNullPointer]
	_ = same[StatusInvalidUTF8-C.PLB_ERR_INVALID_UTF8]
	_ = same[C.PLB_ERR_INVALID_UTF8-StatusInvalidUTF8]
	_ = same[StatusInvalidConfig-C.PLB_ERR_INVALID_CONFIG]
	_ = same[C.PLB_ERR_INVALID_CONFIG-StatusInvalidConfig]
	_ = same[StatusNegativeWeight-C.PLB_ERR_NEGATIVE_WEIGHT]
	_ = same[C.PLB_ERR_NEGATIVE_WEIGHT-StatusNegativeWeight]
	_ = same[StatusDuplicateID-C.PLB_ERR_DUPLICATE_ID]
	_ = same[C.PLB_ERR_DUPLICATE_ID-StatusDuplicateID]
	_ = same[StatusIDOutOfRange-C.PLB_ERR_ID_OUT_OF_RANGE]
	_ = same[C.PLB_ERR_ID_OUT_OF_RANGE-StatusIDOutOfRange]
	_ = same[StatusNoProvider-C.PLB_ERR_NO_PROVIDER]
	_ = same[C.PLB_ERR_NO_PROVIDER-StatusNoProvider]
	_ = same[StatusNoCandidate-C.PLB_ERR_NO_CANDIDATE]
	_ = same[C.PLB_ERR_NO_CANDIDATE-StatusNoCandidate]
	_ = same[StatusUnknownCandidate-C.PLB_ERR_UNKNOWN_CANDIDATE]
	_ = same[C.PLB_ERR_UNKNOWN_CANDIDATE-StatusUnknownCandidate]
	_ = same[StatusUnknownMethod-C.PLB_ERR_UNKNOWN_METHOD]
	_ = same[C.PLB_ERR_UNKNOWN_METHOD-StatusUnknownMethod]
	_ = same[StatusUnknownOutcome-C.PLB_ERR_UNKNOWN_OUTCOME]
	_ = same[C.PLB_ERR_UNKNOWN_OUTCOME-StatusUnknownOutcome]
	_ = same[StatusBufferTooSmall-C.PLB_ERR_BUFFER_TOO_SMALL]
	_ = same[C.PLB_ERR_BUFFER_TOO_SMALL-StatusBufferTooSmall]
	_ = same[StatusPanic-C.PLB_ERR_PANIC]
	_ = same[C.PLB_ERR_PANIC-StatusPanic]
	_ = same[StatusInvalidArgument-C.PLB_ERR_INVALID_ARGUMENT]
	_ = same[C.PLB_ERR_INVALID_ARGUMENT-StatusInvalidArgument]
	_ = same[StatusLimitExceeded-C.PLB_ERR_LIMIT_EXCEEDED]
	_ = same[C.PLB_ERR_LIMIT_EXCEEDED-StatusLimitExceeded]
	_ = same[Success-C.PLB_OUTCOME_SUCCESS]
	_ = same[C.PLB_OUTCOME_SUCCESS-Success]
	_ = same[Failure-C.PLB_OUTCOME_FAILURE]
	_ = same[C.PLB_OUTCOME_FAILURE-Failure]
	_ = same[Timeout-C.PLB_OUTCOME_TIMEOUT]
	_ = same[C.PLB_OUTCOME_TIMEOUT-Timeout]
	_ = same[Cancelled-C.PLB_OUTCOME_CANCELLED]
	_ = same[C.PLB_OUTCOME_CANCELLED-Cancelled]
}

// statusNames are the C macro names, so a Go error message can be grepped
// for in the header and in the other bindings.
var statusNames = map[Status]string{
	StatusOK:               "PLB_OK",
	StatusNullPointer:      "PLB_ERR_NULL_POINTER",
	StatusInvalidUTF8:      "PLB_ERR_INVALID_UTF8",
	StatusInvalidConfig:    "PLB_ERR_INVALID_CONFIG",
	StatusNegativeWeight:   "PLB_ERR_NEGATIVE_WEIGHT",
	StatusDuplicateID:      "PLB_ERR_DUPLICATE_ID",
	StatusIDOutOfRange:     "PLB_ERR_ID_OUT_OF_RANGE",
	StatusNoProvider:       "PLB_ERR_NO_PROVIDER",
	StatusNoCandidate:      "PLB_ERR_NO_CANDIDATE",
	StatusUnknownCandidate: "PLB_ERR_UNKNOWN_CANDIDATE",
	StatusUnknownMethod:    "PLB_ERR_UNKNOWN_METHOD",
	StatusUnknownOutcome:   "PLB_ERR_UNKNOWN_OUTCOME",
	StatusBufferTooSmall:   "PLB_ERR_BUFFER_TOO_SMALL",
	StatusPanic:            "PLB_ERR_PANIC",
	StatusInvalidArgument:  "PLB_ERR_INVALID_ARGUMENT",
	StatusLimitExceeded:    "PLB_ERR_LIMIT_EXCEEDED",
}

// String returns the C macro name, e.g. "PLB_ERR_NO_PROVIDER".
func (s Status) String() string {
	if name, ok := statusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("PLB_STATUS(%d)", int32(s))
}

// Text is the library's static description of the status (plb_status_str).
func (s Status) Text() string {
	statusTextOnce.Do(loadStatusTexts)
	if text, ok := statusTexts[s]; ok {
		return text
	}
	return C.GoString(C.plb_status_str(C.int32_t(s)))
}

// The texts are static in the library; reading them once keeps the error path
// of hot calls (select returns only a code) down to a map lookup.
var (
	statusTextOnce sync.Once
	statusTexts    map[Status]string
)

func loadStatusTexts() {
	statusTexts = make(map[Status]string, len(statusNames))
	for s := range statusNames {
		statusTexts[s] = C.GoString(C.plb_status_str(C.int32_t(s)))
	}
}

// Error is a failure reported by the library: its status code and message.
// Cold calls (New, Update) carry the library's detailed message; the other
// calls return only a code, so their message is the status text, except an
// ErrInvalidArgument from a report, whose message names the argument.
//
// Compare with errors.Is against the Err* sentinels (matched by status), or
// use errors.As to read Status and Message.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Status.Text()
	}
	return "polylb: " + msg + " (" + e.Status.String() + ")"
}

// Is reports whether target is an *Error with the same status, so
// errors.Is(err, polylb.ErrNoProvider) works whatever the message. A nil
// *Error target matches nothing.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Status == e.Status
}

// Sentinels for errors.Is, one per status code. Do not modify them.
var (
	ErrNullPointer      = &Error{Status: StatusNullPointer}
	ErrInvalidUTF8      = &Error{Status: StatusInvalidUTF8}
	ErrInvalidConfig    = &Error{Status: StatusInvalidConfig}
	ErrNegativeWeight   = &Error{Status: StatusNegativeWeight}
	ErrDuplicateID      = &Error{Status: StatusDuplicateID}
	ErrIDOutOfRange     = &Error{Status: StatusIDOutOfRange}
	ErrNoProvider       = &Error{Status: StatusNoProvider}
	ErrNoCandidate      = &Error{Status: StatusNoCandidate}
	ErrUnknownCandidate = &Error{Status: StatusUnknownCandidate}
	ErrUnknownMethod    = &Error{Status: StatusUnknownMethod}
	ErrUnknownOutcome   = &Error{Status: StatusUnknownOutcome}
	ErrBufferTooSmall   = &Error{Status: StatusBufferTooSmall}
	ErrPanic            = &Error{Status: StatusPanic}
	ErrInvalidArgument  = &Error{Status: StatusInvalidArgument}
	ErrLimitExceeded    = &Error{Status: StatusLimitExceeded}
)

// ErrClosed is returned by every method of a Balancer after Close. It is not
// a library status: the Go side refuses the call before reaching C.
var ErrClosed = errors.New("polylb: balancer is closed")

// statusError turns a code returned by C (positive, or negated as plb_select
// returns it) into an *Error carrying the status text.
func statusError[T ~int32 | ~int64](code T) error {
	if code < 0 {
		code = -code
	}
	status := Status(code)
	return &Error{Status: status, Message: status.Text()}
}

// messageError builds an *Error from a cold call's status and the text the
// library wrote into our error buffer.
func messageError(code C.int32_t, msg []byte) error {
	if len(msg) == 0 {
		return statusError(code)
	}
	return &Error{Status: Status(code), Message: string(msg)}
}
