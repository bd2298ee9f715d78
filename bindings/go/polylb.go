// Package polylb is the Go binding of polylb, a load-balancing library for RPC
// clients (Apache Dubbo's six strategies, exact, plus latency-aware ones),
// written in Rust and called here through its C ABI (include/polylb.h).
//
// The binding is thin: it marshals arguments, manages the lifetime of the
// library handle and turns status codes into errors. Every balancing decision
// is made by the library.
//
// A Balancer is safe for concurrent use by many goroutines, including Update
// while others Select and Report, and Close while others are mid-call.
//
// Lifetime: Close makes every later call return ErrClosed and empties the
// balancer's invoker set, which releases the per-invoker state; the native
// handle itself (configuration, method names, per-method state) is freed by
// a runtime cleanup once the *Balancer is unreachable, so that the hot calls
// need no in-flight count (see Balancer.Close).
//
// Linking: the package links the static library built by `cargo build
// --release` at the repository root (target/release/libpolylb.a) and reads
// the header from include/. Both paths are relative to this directory, so the
// module is used from a checkout of the polylb repository (see README.md).
package polylb

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo linux LDFLAGS: ${SRCDIR}/../../target/release/libpolylb.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
#cgo darwin LDFLAGS: ${SRCDIR}/../../target/release/libpolylb.a -liconv -lSystem -lc -lm
#cgo windows LDFLAGS: ${SRCDIR}/../../target/release/libpolylb.a -lkernel32 -lntdll -luserenv -lws2_32 -ldbghelp

// No polylb function keeps a pointer it was given after returning (the
// header: "the library never keeps a pointer the caller passed in") and none
// calls back into Go. noescape says the first; cgo honours it only together
// with nocallback, and then leaves Go memory passed to C where it is: []byte
// keys (even a []byte(string) conversion of up to 32 bytes, the stack buffer
// Go gives one; a longer string is copied to the heap), candidate lists, out-parameters
// and error buffers stay on the caller's stack instead of being moved to the
// heap. nocallback alone buys nothing (today it only makes cgo toggle a
// runtime flag around the call), so calls without pointer arguments
// (report, abi_version, free) do without it.
#cgo noescape plbgo_select
#cgo nocallback plbgo_select
#cgo noescape plbgo_select_among
#cgo nocallback plbgo_select_among
#cgo noescape plb_balancer_new
#cgo nocallback plb_balancer_new
#cgo noescape plb_balancer_method
#cgo nocallback plb_balancer_method
#cgo noescape plb_balancer_stats
#cgo nocallback plb_balancer_stats
#cgo noescape plb_balancer_update
#cgo nocallback plb_balancer_update

#include <stdint.h>
#include <stdlib.h>
#include "polylb.h"

// The hot calls take the handle as an integer. plb_balancer is an incomplete
// type, so cgo cannot prove that what a plb_balancer* points at holds no Go
// pointer, and checks the handle on every call (runtime.cgoCheckPointer,
// about 5 % of a Select+Report). An integer needs no check; the C compiler
// inlines these into cgo's call stubs.
static inline int64_t plbgo_select(uintptr_t b, uint32_t method, const uint8_t *key, size_t key_len,
                                   int64_t now_us) {
	return plb_select((const plb_balancer *)b, method, key, key_len, now_us);
}
static inline int64_t plbgo_select_among(uintptr_t b, uint32_t method, const uint8_t *key, size_t key_len,
                                         const uint64_t *candidates, size_t n_candidates,
                                         const uint64_t *excluded, size_t n_excluded, int64_t now_us) {
	return plb_select_among((const plb_balancer *)b, method, key, key_len, candidates, n_candidates,
	                        excluded, n_excluded, now_us);
}
static inline int32_t plbgo_report(uintptr_t b, uint32_t method, uint64_t id, int64_t elapsed_us,
                                   int32_t outcome, int64_t now_us) {
	return plb_report((const plb_balancer *)b, method, id, elapsed_us, outcome, now_us);
}
static inline int32_t plbgo_report_provider_metrics(uintptr_t b, uint32_t method, uint64_t id,
                                                    int64_t provider_time_ms, double cpu_load,
                                                    int64_t rt_us, int64_t now_us) {
	return plb_report_provider_metrics((const plb_balancer *)b, method, id, provider_time_ms, cpu_load,
	                                   rt_us, now_us);
}
static inline int32_t plbgo_report_load(uintptr_t b, uint64_t id, double qps, double eps, double utilization,
                                        int64_t now_us) {
	return plb_report_load((const plb_balancer *)b, id, qps, eps, utilization, now_us);
}
static inline int32_t plbgo_report_reconnect(uintptr_t b, uint64_t id, int64_t now_us) {
	return plb_report_reconnect((const plb_balancer *)b, id, now_us);
}
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Method is an interned method name (see Balancer.Method). Per-method state
// (round-robin position, latency windows, …) is keyed by it.
type Method uint32

// ServiceLevel is the method id of the empty name: state shared by the
// whole service. It is valid on every Balancer without calling Method.
const ServiceLevel Method = 0

// Outcome is how a call ended, passed to Report.
type Outcome int32

// Outcomes understood by the library. Cancelled means the request was never
// sent, or was given up with no verdict on the provider (cancelled by its
// caller): the report only undoes the in-flight count.
const (
	Success   Outcome = 0 // PLB_OUTCOME_SUCCESS
	Failure   Outcome = 1 // PLB_OUTCOME_FAILURE
	Timeout   Outcome = 2 // PLB_OUTCOME_TIMEOUT
	Cancelled Outcome = 3 // PLB_OUTCOME_CANCELLED
)

// Defaults of an Invoker as Dubbo has them (see NewInvoker).
const (
	DefaultWeight   int32 = 100
	DefaultWarmupMs int32 = -1 // any negative value: the balancer's default (Dubbo: 10 min)
)

// Invoker is one provider as registered with Update.
type Invoker struct {
	// ID is the caller's stable identity of the provider, unique within a
	// set and at most math.MaxInt64 (Select returns it through an int64).
	ID uint64
	// Address is Dubbo's host:port, e.g. "10.0.0.1:20880"; it places the
	// invoker on the consistent-hash ring (maglev: in its lookup table;
	// rendezvous: in its scores), so the hashing strategies need a non-empty one.
	Address string
	// Weight must be >= 0. The zero value is weight 0, which random, roundrobin
	// and polylb's own strategies never pick while another invoker has weight,
	// but leastactive and shortestresponse pick when it alone is the least
	// loaded and consistenthash ignores (as Dubbo's do): use NewInvoker for
	// Dubbo's default of 100.
	Weight int32
	// StartTimeMs is the provider's start time in Unix milliseconds; 0 means
	// unknown, which disables warm-up (as in Dubbo).
	StartTimeMs int64
	// WarmupMs is the warm-up period; negative means the balancer's default
	// and 0 means no warm-up.
	WarmupMs int32
	// Zone is optional; "" means none.
	Zone string
}

// NewInvoker returns an invoker with Dubbo's defaults: weight 100, unknown
// start time (no warm-up), default warm-up period, no zone.
func NewInvoker(id uint64, address string) Invoker {
	return Invoker{ID: id, Address: address, Weight: DefaultWeight, WarmupMs: DefaultWarmupMs}
}

// Balancer owns one library balancer. Create it with New and release it
// with Close.
//
// Two guards make Close safe while other goroutines are mid-call:
//
//   - The handle is freed only by a runtime cleanup, once the Balancer is
//     unreachable. Every method keeps b reachable until its C call has
//     returned (runtime.KeepAlive), so C never sees a freed handle and the
//     hot calls (Select…, Report…) need no in-flight count: they only load
//     closed before the call.
//   - Close empties the invoker set (an update with no invokers). The cold
//     calls (Update, Method, Stats…) are counted in calls, and the set is
//     emptied only when none is inside the library: an Update that entered
//     before Close cannot re-install a set after the emptying.
type Balancer struct {
	// Read by every hot call and written at most once: these two words stay
	// apart from the cold calls' counters below, so the hot calls share no
	// cache line that another core writes.
	handle *C.plb_balancer // set by New, never changed; freed by the cleanup
	closed atomic.Bool     // set by Close

	_ [64]byte // a cache line between the hot and the cold fields

	// calls counts the cold calls currently inside the library, plus
	// closedBit once Close has run. Whichever of Close and the last cold call
	// in flight finishes last empties the set.
	calls   atomic.Int64
	emptied atomic.Bool

	// statsHint is the buffer size the last Stats needed, so a steady set
	// needs one C call per Stats instead of a too-small round trip.
	statsHint atomic.Int64
}

const closedBit = int64(1) << 62

// errBufSize is the first buffer for the detailed error text of cold calls;
// the library truncates longer messages rather than failing, and New asks
// again with a larger buffer, up to errBufLimit, when a message filled it
// (Update's messages are short).
const (
	errBufSize  = 1024
	errBufLimit = 1 << 20
)

// New creates a balancer from a configuration string of Dubbo URL parameters,
// e.g. "loadbalance=consistenthash&hash.nodes=160". An unknown or misspelled
// key, or a bad value, is an ErrInvalidConfig whose message names the key.
func New(config string) (*Balancer, error) {
	if got := uint32(C.plb_abi_version()); got != C.PLB_ABI_VERSION {
		return nil, fmt.Errorf("polylb: the linked library has ABI version %d, this binding was built against %d (rebuild target/release/libpolylb.a)", got, C.PLB_ABI_VERSION)
	}
	var handle *C.plb_balancer
	var first [errBufSize]byte
	errBuf := first[:]
	var errLen C.size_t
	for {
		rc := C.plb_balancer_new(stringPtr(config), C.size_t(len(config)), &handle,
			(*C.char)(unsafe.Pointer(&errBuf[0])), C.size_t(len(errBuf)), &errLen)
		if rc == C.PLB_OK {
			break
		}
		// A message that filled the buffer may have been cut: ask again with a larger one,
		// as polylb.hpp does, so that Message is the library's whole text (as in Java and Rust).
		if !errFilled(errBuf, errLen) || len(errBuf) >= errBufLimit {
			return nil, messageError(rc, errText(errBuf, errLen))
		}
		errBuf = make([]byte, 4*len(errBuf))
	}
	b := &Balancer{handle: handle}
	b.statsHint.Store(4096)
	// The only place the handle is freed, closed or not. The cleanup runs
	// once b is unreachable, which cannot happen while a method of b is
	// running (each one calls runtime.KeepAlive(b) after its C call), so it
	// never races with a call: the header's "free after every other call has
	// returned" holds.
	runtime.AddCleanup(b, freeHandle, handle)
	return b, nil
}

// cleanupsRun counts handles freed by the cleanup, and cleanupHook (set by
// tests only) sees each of them: the tests check that every balancer, closed
// or not, is freed once unreachable, and exactly once.
var (
	cleanupsRun atomic.Int64
	cleanupHook atomic.Pointer[func(handle unsafe.Pointer)]
)

func freeHandle(handle *C.plb_balancer) {
	C.plb_balancer_free(handle)
	cleanupsRun.Add(1)
	if hook := cleanupHook.Load(); hook != nil {
		(*hook)(unsafe.Pointer(handle))
	}
}

// Close closes the balancer. It is idempotent, safe to call while other
// goroutines are mid-call, and always returns nil.
//
// Every call that starts after Close returns ErrClosed. A call already
// running either completes normally or returns ErrClosed: a select that
// races with Close may find the emptied set, and reports its failure as
// ErrClosed rather than ErrNoProvider.
//
// Memory: Close empties the invoker set at once (or, if an Update, Method or
// Stats call is inside the library, as soon as the last of them returns), so
// the library drops the set and its per-invoker state: counters, rings,
// latency windows. Another thread that ran calls on the balancer may keep
// its cached copy of the last set until its cache slot is taken by another
// balancer, it exits, or the handle is freed (see the header). The rest
// — configuration, interned method names, per-method strategy state (for
// roundrobin, a small entry per method and invoker) — is freed with the
// handle, by a cleanup that runs after the *Balancer has become unreachable,
// at a later garbage collection.
func (b *Balancer) Close() error {
	if b == nil {
		// As (*os.File).Close: a `defer lb.Close()` placed before New's error
		// is checked must not turn a config error into a panic.
		return nil
	}
	// First, so that once any Close has returned (also a second one that
	// lost the race below) the hot calls refuse.
	b.closed.Store(true)
	previous := b.calls.Or(closedBit)
	if previous&closedBit != 0 {
		return nil // already closed
	}
	if previous == 0 {
		b.empty()
	}
	return nil
}

// hotHandle is the handle as the integer the plbgo_* wrappers take.
func (b *Balancer) hotHandle() C.uintptr_t {
	return C.uintptr_t(uintptr(unsafe.Pointer(b.handle)))
}

// enter registers a cold call into the library; it fails once Close has run.
func (b *Balancer) enter() bool {
	if b.calls.Add(1)&closedBit != 0 {
		b.leave()
		return false
	}
	return true
}

// leave ends a cold call; the last one out after Close empties the set.
func (b *Balancer) leave() {
	if b.calls.Add(-1) == closedBit {
		b.empty()
	}
}

// empty replaces the set with an empty one. It runs only when calls is
// exactly closedBit: closed, and no cold call inside the library or able to
// enter it, so no Update can follow it.
func (b *Balancer) empty() {
	// Close and a departing (or refused) cold call can both see "closed,
	// nothing in flight"; once is enough.
	if b.emptied.CompareAndSwap(false, true) {
		// The header accepts (NULL, 0) and a NULL error buffer. The status
		// is ignored: only PLB_ERR_PANIC is possible, and the set would
		// then still be freed with the handle.
		// The update also drops this thread's cached copy of the old set;
		// copies on other threads go as described in the header.
		C.plb_balancer_update(b.handle, nil, 0, nil, 0, nil)
		runtime.KeepAlive(b)
	}
}

// hotError is the error of a hot call that failed. A call that raced with
// Close may have run on the emptied set: once closed, the failure is
// ErrClosed, so such calls see a valid result or ErrClosed, nothing else.
func hotError[T ~int32 | ~int64](b *Balancer, code T) error {
	if b.closed.Load() {
		return ErrClosed
	}
	return statusError(code)
}

// Update atomically replaces the whole invoker set. State of ids that stay is
// kept. An empty set is allowed; Select then fails with ErrNoProvider.
func (b *Balancer) Update(invokers []Invoker) error {
	// The C array holds pointers to the address and zone bytes, and cgo
	// forbids passing C a Go pointer to memory that holds Go pointers
	// (unless each is pinned). The array and all strings are therefore
	// copied into one C allocation, freed when the call returns: one malloc
	// per update, nothing for the GC to track, and the rule holds whatever
	// the strings point at. Update is a cold call and the library copies
	// the set anyway, so the extra copy costs nothing that matters.
	// (runtime.Pinner would avoid the copy but needs one Pin per string and
	// a Go-allocated array, with nothing gained on this path.)
	arrayBytes := uintptr(len(invokers)) * unsafe.Sizeof(C.plb_invoker{})
	total := arrayBytes
	for i := range invokers {
		total += uintptr(len(invokers[i].Address) + len(invokers[i].Zone))
	}
	var array *C.plb_invoker
	if len(invokers) > 0 {
		block := C.malloc(C.size_t(total)) // cgo's malloc never returns nil
		defer C.free(block)
		array = (*C.plb_invoker)(block)
		entries := unsafe.Slice(array, len(invokers))
		text := unsafe.Slice((*byte)(unsafe.Add(block, arrayBytes)), total-arrayBytes)
		for i, inv := range invokers {
			var address, zone *C.uint8_t
			address, text = copyToC(text, inv.Address)
			zone, text = copyToC(text, inv.Zone)
			entries[i] = C.plb_invoker{
				id:            C.uint64_t(inv.ID),
				address:       address,
				address_len:   C.size_t(len(inv.Address)),
				weight:        C.int32_t(inv.Weight),
				start_time_ms: C.int64_t(inv.StartTimeMs),
				warmup_ms:     C.int32_t(inv.WarmupMs),
				zone:          zone,
				zone_len:      C.size_t(len(inv.Zone)),
			}
		}
	}
	if !b.enter() {
		return ErrClosed
	}
	var errBuf [errBufSize]byte
	var errLen C.size_t
	rc := C.plb_balancer_update(b.handle, array, C.size_t(len(invokers)),
		(*C.char)(unsafe.Pointer(&errBuf[0])), C.size_t(len(errBuf)), &errLen)
	b.leave()
	runtime.KeepAlive(b)
	if rc != C.PLB_OK {
		return messageError(rc, errText(errBuf[:], errLen))
	}
	return nil
}

// copyToC copies s to the front of dst (C memory) and returns a pointer to
// the copy (nil for "", which the ABI reads as empty) and the rest of dst.
func copyToC(dst []byte, s string) (*C.uint8_t, []byte) {
	if len(s) == 0 {
		return nil, dst
	}
	copy(dst, s)
	return (*C.uint8_t)(unsafe.Pointer(&dst[0])), dst[len(s):]
}

// Method interns a method name and returns its id for Select and Report.
// The same name always gets the same id; "" is ServiceLevel.
func (b *Balancer) Method(name string) (Method, error) {
	if !b.enter() {
		return 0, ErrClosed
	}
	var id C.uint32_t
	rc := C.plb_balancer_method(b.handle, stringPtr(name), C.size_t(len(name)), &id)
	b.leave()
	runtime.KeepAlive(b)
	if rc == C.PLB_ERR_INVALID_UTF8 {
		// The lookup returns a status only; the words are the binding's.
		return 0, &Error{Status: StatusInvalidUTF8, Message: "method name is not valid UTF-8: " + utf8Flaw(name)}
	}
	if rc != C.PLB_OK {
		return 0, statusError(rc)
	}
	return Method(id), nil
}

// Select picks an invoker for one call and returns its id. The call counts as
// in flight until Report. key is the hash key of consistenthash, boundedhash,
// maglev and rendezvous (other strategies ignore it; nil is fine). The library's
// clock is used.
func (b *Balancer) Select(method Method, key []byte) (uint64, error) {
	return b.selectAt(method, key, 0)
}

// SelectAt is Select at a caller-supplied time (virtual time for simulators
// and tests). The zero time.Time means the library's clock; any other time is
// used as given, to the microsecond (the Unix epoch's first microsecond counts
// as 1 µs after it, since 0 µs is the C ABI's "library clock").
func (b *Balancer) SelectAt(method Method, key []byte, now time.Time) (uint64, error) {
	return b.selectAt(method, key, unixMicros(now))
}

func (b *Balancer) selectAt(method Method, key []byte, nowUs int64) (uint64, error) {
	if b.closed.Load() {
		return 0, ErrClosed
	}
	r := C.plbgo_select(b.hotHandle(), C.uint32_t(method), bytesPtr(key), C.size_t(len(key)), C.int64_t(nowUs))
	runtime.KeepAlive(b) // the cleanup cannot free the handle before this
	if r < 0 {
		return 0, hotError(b, r)
	}
	return uint64(r), nil
}

// SelectAmong picks among a subset: candidates (nil or empty = every invoker)
// minus excluded (ids already tried, e.g. by failover; ids not in the set are
// ignored). A candidate that is not in the set is ErrUnknownCandidate; when
// every candidate is excluded the result is ErrNoCandidate.
func (b *Balancer) SelectAmong(method Method, key []byte, candidates, excluded []uint64) (uint64, error) {
	return b.selectAmongAt(method, key, candidates, excluded, 0)
}

// SelectAmongAt is SelectAmong at a caller-supplied time (zero = library clock).
func (b *Balancer) SelectAmongAt(method Method, key []byte, candidates, excluded []uint64, now time.Time) (uint64, error) {
	return b.selectAmongAt(method, key, candidates, excluded, unixMicros(now))
}

func (b *Balancer) selectAmongAt(method Method, key []byte, candidates, excluded []uint64, nowUs int64) (uint64, error) {
	if b.closed.Load() {
		return 0, ErrClosed
	}
	r := C.plbgo_select_among(b.hotHandle(), C.uint32_t(method), bytesPtr(key), C.size_t(len(key)),
		idsPtr(candidates), C.size_t(len(candidates)),
		idsPtr(excluded), C.size_t(len(excluded)), C.int64_t(nowUs))
	runtime.KeepAlive(b)
	if r < 0 {
		return 0, hotError(b, r)
	}
	return uint64(r), nil
}

// Report ends a call started by Select: how long it took and how it ended.
// A report for an id no longer in the set is accepted and ignored. elapsed is
// passed in whole microseconds (truncated); any negative one is ErrInvalidArgument.
func (b *Balancer) Report(method Method, id uint64, elapsed time.Duration, outcome Outcome) error {
	return b.reportAt(method, id, elapsed, outcome, 0)
}

// ReportAt is Report at a caller-supplied time (zero = library clock).
func (b *Balancer) ReportAt(method Method, id uint64, elapsed time.Duration, outcome Outcome, now time.Time) error {
	return b.reportAt(method, id, elapsed, outcome, unixMicros(now))
}

func (b *Balancer) reportAt(method Method, id uint64, elapsed time.Duration, outcome Outcome, nowUs int64) error {
	if b.closed.Load() {
		return ErrClosed
	}
	rc := C.plbgo_report(b.hotHandle(), C.uint32_t(method), C.uint64_t(id),
		C.int64_t(micros(elapsed)), C.int32_t(outcome), C.int64_t(nowUs))
	runtime.KeepAlive(b)
	if rc != C.PLB_OK {
		if rc == C.PLB_ERR_INVALID_ARGUMENT && !b.closed.Load() {
			return invalidArgument("elapsed", elapsed)
		}
		return hotError(b, rc)
	}
	return nil
}

// invalidArgument is ErrInvalidArgument naming the argument the library's bare
// code was about.
func invalidArgument(name string, value any) error {
	want := ">= 0"
	if _, ok := value.(float64); ok {
		want = "finite and >= 0" // NaN and +Inf fail too
	}
	return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("invalid argument: %s = %v (want %s)", name, value, want)}
}

// ReportProviderMetrics feeds the adaptive strategy with what a Dubbo provider
// sends back in its lb_adaptive attachment: its clock (curTime) and CPU load,
// plus the round-trip time the consumer measured. A NaN or negative load is
// ErrInvalidArgument.
func (b *Balancer) ReportProviderMetrics(method Method, id uint64, providerTime time.Time, cpuLoad float64, rt time.Duration) error {
	return b.reportProviderMetricsAt(method, id, providerTime, cpuLoad, rt, 0)
}

// ReportProviderMetricsAt is ReportProviderMetrics at a caller-supplied time
// (zero = library clock).
func (b *Balancer) ReportProviderMetricsAt(method Method, id uint64, providerTime time.Time, cpuLoad float64, rt time.Duration, now time.Time) error {
	return b.reportProviderMetricsAt(method, id, providerTime, cpuLoad, rt, unixMicros(now))
}

func (b *Balancer) reportProviderMetricsAt(method Method, id uint64, providerTime time.Time, cpuLoad float64, rt time.Duration, nowUs int64) error {
	if b.closed.Load() {
		return ErrClosed
	}
	rc := C.plbgo_report_provider_metrics(b.hotHandle(), C.uint32_t(method), C.uint64_t(id),
		C.int64_t(unixMillis(providerTime)), C.double(cpuLoad), C.int64_t(micros(rt)), C.int64_t(nowUs))
	runtime.KeepAlive(b)
	if rc != C.PLB_OK {
		if rc == C.PLB_ERR_INVALID_ARGUMENT && !b.closed.Load() {
			switch {
			case !(cpuLoad >= 0) || math.IsInf(cpuLoad, 1): // NaN too
				return invalidArgument("cpuLoad", cpuLoad)
			case rt < 0:
				return invalidArgument("rt", rt)
			case unixMillis(providerTime) < 0:
				return invalidArgument("providerTime", providerTime)
			}
		}
		return hotError(b, rc)
	}
	return nil
}

// ReportLoad feeds the orca strategy with a provider's load report, as ORCA
// carries one (per call in a response's trailers, or out of band): the
// queries per second the provider served (qps), the failed ones among them
// (eps, at most qps) and its utilization (CPU or the application's own, 1.0 =
// full). orca weighs the provider by qps / (utilization + eps/qps ×
// orca.errorPenalty). The report is the provider's, not a method's: it counts
// for every method. A NaN, infinite or negative number, or eps above qps, is
// ErrInvalidArgument; other strategies, and ids not in the set, accept and
// ignore reports.
func (b *Balancer) ReportLoad(id uint64, qps, eps, utilization float64) error {
	return b.reportLoadAt(id, qps, eps, utilization, 0)
}

// ReportLoadAt is ReportLoad at a caller-supplied time (zero = library clock).
func (b *Balancer) ReportLoadAt(id uint64, qps, eps, utilization float64, now time.Time) error {
	return b.reportLoadAt(id, qps, eps, utilization, unixMicros(now))
}

func (b *Balancer) reportLoadAt(id uint64, qps, eps, utilization float64, nowUs int64) error {
	if b.closed.Load() {
		return ErrClosed
	}
	rc := C.plbgo_report_load(b.hotHandle(), C.uint64_t(id), C.double(qps), C.double(eps),
		C.double(utilization), C.int64_t(nowUs))
	runtime.KeepAlive(b)
	if rc != C.PLB_OK {
		if rc == C.PLB_ERR_INVALID_ARGUMENT && !b.closed.Load() {
			bad := func(x float64) bool { return !(x >= 0) || math.IsInf(x, 1) } // NaN too
			switch {
			case bad(qps):
				return invalidArgument("qps", qps)
			case bad(eps):
				return invalidArgument("eps", eps)
			case bad(utilization):
				return invalidArgument("utilization", utilization)
			case eps > qps:
				return &Error{Status: StatusInvalidArgument,
					Message: fmt.Sprintf("invalid argument: eps = %v is above qps = %v (want eps <= qps)", eps, qps)}
			}
		}
		return hotError(b, rc)
	}
	return nil
}

// ReportReconnect says that invoker id's connection was established again
// (a gRPC subchannel READY after another state). Under orca it restarts the
// invoker's run of load reports, as gRPC's weighted_round_robin (gRFC A58)
// does: its weight stops counting at the next pick, and its next report starts
// a new blackout (orca.blackoutMs), for the server behind a reconnect may be a
// restarted, cold process. Other strategies, and ids not in the set, accept
// and ignore it. polylbgrpc calls it for its endpoints.
func (b *Balancer) ReportReconnect(id uint64) error {
	return b.reportReconnectAt(id, 0)
}

// ReportReconnectAt is ReportReconnect at a caller-supplied time (zero =
// library clock).
func (b *Balancer) ReportReconnectAt(id uint64, now time.Time) error {
	return b.reportReconnectAt(id, unixMicros(now))
}

func (b *Balancer) reportReconnectAt(id uint64, nowUs int64) error {
	if b.closed.Load() {
		return ErrClosed
	}
	rc := C.plbgo_report_reconnect(b.hotHandle(), C.uint64_t(id), C.int64_t(nowUs))
	runtime.KeepAlive(b)
	if rc != C.PLB_OK {
		return hotError(b, rc)
	}
	return nil
}

// Stats returns the live per-invoker counters, with effective (warm-up)
// weights evaluated now by the library's clock.
func (b *Balancer) Stats() (Stats, error) {
	return b.StatsAt(time.Time{})
}

// StatsAt is Stats with effective weights evaluated at now (zero = library
// clock). Select and Report use the library's clock, which is coarse; read
// at a precise time of your own, peakewma's calls in flight look a few ms
// older than they are (docs/abi-contract.md).
func (b *Balancer) StatsAt(now time.Time) (Stats, error) {
	raw, err := b.StatsJSON(now)
	if err != nil {
		return Stats{}, err
	}
	var stats Stats
	// Not json.Unmarshal: it would scan the document twice more before
	// handing it to UnmarshalJSON.
	if err := stats.UnmarshalJSON(raw); err != nil {
		return Stats{}, fmt.Errorf("polylb: stats JSON from the library does not parse: %w", err)
	}
	return stats, nil
}

// StatsJSON returns the library's stats document unparsed (zero now = library
// clock), including fields this binding does not model. It sizes its buffer by
// the last document, with a quarter's slack, and tries again when the set grew
// past it meanwhile: ErrBufferTooSmall only after 8 tries against a set that
// grew past the slack every time (Python's binding tries until it fits).
func (b *Balancer) StatsJSON(now time.Time) ([]byte, error) {
	nowUs := unixMicros(now)
	// A zero-value Balancer (not made by New) has no hint: the library then
	// answers its nil handle with the error every other method gives.
	size := max(b.statsHint.Load(), 64)
	// The set can grow between the size query and the retry (another
	// goroutine may Update), so retry a few times, each with some slack.
	for attempt := 0; attempt < 8; attempt++ {
		buf := make([]byte, size)
		var needed C.size_t
		if !b.enter() {
			return nil, ErrClosed
		}
		rc := C.plb_balancer_stats(b.handle, C.int64_t(nowUs),
			(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &needed)
		b.leave()
		runtime.KeepAlive(b)
		switch rc {
		case C.PLB_OK:
			// The next guess follows the size down as well as up: kept at its
			// peak, one Stats of a large set made every later one allocate that
			// much, and the returned document keep it.
			b.statsHint.Store(max(4096, int64(needed)+1+int64(needed)/4))
			if int64(len(buf)) > 2*(int64(needed)+1) {
				return append([]byte(nil), buf[:needed]...), nil
			}
			return buf[:needed], nil
		case C.PLB_ERR_BUFFER_TOO_SMALL:
			size = int64(needed) + 1 + int64(needed)/4 // +1: the NUL is not counted
			b.statsHint.Store(size)
		default:
			return nil, statusError(rc)
		}
	}
	return nil, statusError(C.int32_t(C.PLB_ERR_BUFFER_TOO_SMALL))
}

// Version is the library's version, e.g. "0.1.0".
func Version() string {
	return C.GoString(C.plb_version())
}

// ABIVersion is the C ABI version of the linked library. It is also the
// cheapest possible call into the library, which the benchmarks use as the
// cgo floor.
func ABIVersion() uint32 {
	return uint32(C.plb_abi_version())
}

func unixMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0 // the ABI's "use the library's clock"
	}
	if us := unixUnits(t, 1_000_000); us != 0 {
		return us
	}
	// 0 µs would mean the library's clock: a virtual clock that starts at the Unix epoch
	// must not silently read the wall clock during its first microsecond.
	return 1
}

func unixMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return unixUnits(t, 1000)
}

// unixUnits is t in whole 1/perSecond seconds since the Unix epoch. Where UnixMicro and
// UnixMilli would wrap (beyond about ±292,000 and ±292 million years; time.Unix(math.MaxInt64,
// 0), a common "never", came out in the far past) it saturates to the library's latest and
// earliest times instead.
func unixUnits(t time.Time, perSecond int64) int64 {
	maxSec, maxSub := math.MaxInt64/perSecond, math.MaxInt64%perSecond
	sec, sub := t.Unix(), int64(t.Nanosecond())/(1_000_000_000/perSecond)
	switch {
	case sec > maxSec || sec == maxSec && sub > maxSub:
		return math.MaxInt64
	case sec < -maxSec-1 || sec == -maxSec-1 && sub < perSecond-maxSub-1:
		return math.MinInt64
	}
	return sec*perSecond + sub
}

// micros is d in whole microseconds, truncated toward zero, except that a negative d
// stays negative (the library rejects it) instead of truncating to 0.
func micros(d time.Duration) int64 {
	us := d.Microseconds()
	if us == 0 && d < 0 {
		return -1
	}
	return us
}

// The pointer helpers below hand C the address of Go memory that holds no Go
// pointers (bytes, integers), which cgo allows for the duration of the call.
// An empty slice or string becomes (nil or any pointer, 0), which the ABI
// reads as empty.

func bytesPtr(b []byte) *C.uint8_t {
	return (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b)))
}

func stringPtr(s string) *C.uint8_t {
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s)))
}

func idsPtr(ids []uint64) *C.uint64_t {
	return (*C.uint64_t)(unsafe.Pointer(unsafe.SliceData(ids)))
}

// errFilled reports whether the library may have cut its message to fit buf:
// n is what it wrote without the NUL, and it cuts at a character boundary,
// leaving up to 3 bytes unused besides the NUL.
func errFilled(buf []byte, n C.size_t) bool {
	return int(n)+4 >= len(buf)
}

// errText is the message the library wrote into an error buffer (it stops
// at the buffer, whatever length it reports).
func errText(buf []byte, n C.size_t) []byte {
	if int(n) < len(buf) {
		return buf[:n]
	}
	return buf[:len(buf)-1]
}
