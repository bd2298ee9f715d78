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

// Status is a polylb status code (PLB_OK, PLB_ERR_*). The values come from
// include/polylb.h; the C ABI promises they are never renumbered.
type Status int32

// Status codes, one per kind of failure a caller can cause.
const (
	StatusOK               Status = C.PLB_OK
	StatusNullPointer      Status = C.PLB_ERR_NULL_POINTER
	StatusInvalidUTF8      Status = C.PLB_ERR_INVALID_UTF8
	StatusInvalidConfig    Status = C.PLB_ERR_INVALID_CONFIG
	StatusNegativeWeight   Status = C.PLB_ERR_NEGATIVE_WEIGHT
	StatusDuplicateID      Status = C.PLB_ERR_DUPLICATE_ID
	StatusIDOutOfRange     Status = C.PLB_ERR_ID_OUT_OF_RANGE
	StatusNoProvider       Status = C.PLB_ERR_NO_PROVIDER
	StatusNoCandidate      Status = C.PLB_ERR_NO_CANDIDATE
	StatusUnknownCandidate Status = C.PLB_ERR_UNKNOWN_CANDIDATE
	StatusUnknownMethod    Status = C.PLB_ERR_UNKNOWN_METHOD
	StatusUnknownOutcome   Status = C.PLB_ERR_UNKNOWN_OUTCOME
	StatusBufferTooSmall   Status = C.PLB_ERR_BUFFER_TOO_SMALL
	StatusPanic            Status = C.PLB_ERR_PANIC
	StatusInvalidArgument  Status = C.PLB_ERR_INVALID_ARGUMENT
	StatusLimitExceeded    Status = C.PLB_ERR_LIMIT_EXCEEDED
)

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
// calls return only a code, so their message is the status text.
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
// errors.Is(err, polylb.ErrNoProvider) works whatever the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status
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
