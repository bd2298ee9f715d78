//! The C ABI. Thin: it checks pointers and UTF-8, converts types and maps errors; every
//! balancing decision lives in the Rust API. Every export runs inside a panic boundary, so no
//! unwind ever crosses into the host (a caught panic returns `PLB_ERR_PANIC`).

#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)] // the safety contract of each export is in include/polylb.h

use crate::{Balancer, Error, Invoker, Outcome, Status};
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Version of the C ABI. Bindings check it at load time and refuse a mismatch.
pub const PLB_ABI_VERSION: u32 = 1;

/// Success.
pub const PLB_OK: i32 = 0;
/// A required pointer is NULL: the handle, an output, or data with a non-zero length.
pub const PLB_ERR_NULL_POINTER: i32 = 1;
/// Config, address, zone or method name is not valid UTF-8.
pub const PLB_ERR_INVALID_UTF8: i32 = 2;
/// Unknown config key (the message suggests the nearest), bad value, duplicate key, or an
/// option that would do nothing (e.g. `p2c.choices` with another strategy).
pub const PLB_ERR_INVALID_CONFIG: i32 = 3;
/// An invoker weight is negative.
pub const PLB_ERR_NEGATIVE_WEIGHT: i32 = 4;
/// An invoker id appears twice in the set.
pub const PLB_ERR_DUPLICATE_ID: i32 = 5;
/// An invoker id is above INT64_MAX (select returns ids as int64_t).
pub const PLB_ERR_ID_OUT_OF_RANGE: i32 = 6;
/// The invoker set is empty.
pub const PLB_ERR_NO_PROVIDER: i32 = 7;
/// Every candidate is excluded.
pub const PLB_ERR_NO_CANDIDATE: i32 = 8;
/// A candidate id is not in the current invoker set.
pub const PLB_ERR_UNKNOWN_CANDIDATE: i32 = 9;
/// A method id that plb_balancer_method did not return.
pub const PLB_ERR_UNKNOWN_METHOD: i32 = 10;
/// An outcome that is not a PLB_OUTCOME_* value.
pub const PLB_ERR_UNKNOWN_OUTCOME: i32 = 11;
/// The stats buffer is too small; *len holds the length needed (without the NUL).
pub const PLB_ERR_BUFFER_TOO_SMALL: i32 = 12;
/// A bug inside polylb was caught at the boundary; the balancer remains usable.
pub const PLB_ERR_PANIC: i32 = 13;
/// An argument out of its domain: a negative elapsed time; for provider metrics a NaN, infinite
/// or negative CPU load, or a negative response time or provider clock; for a load report a NaN,
/// infinite or negative number, or more errors than queries; an empty address in an
/// update of a hashing strategy (`consistenthash`, `boundedhash`, `maglev`, `rendezvous`); or a
/// length whose size in bytes is above PTRDIFF_MAX (no array is that long, e.g. `(size_t)-1`).
pub const PLB_ERR_INVALID_ARGUMENT: i32 = 14;
/// A limit was exceeded (at most 2^20 method names per balancer, the empty name included; at
/// most 2^32 - 1 points, `hash.nodes` times the invokers, on a hashing strategy's ring, nor
/// more than this process can allocate while it is built: about 24 B per point, checked from
/// 2^24 points on; at most `maglev.tableSize` invokers in a `maglev` set; a set's weights
/// adding up to at most 2^54 - 1, which only sets of over 2^23 invokers can pass).
pub const PLB_ERR_LIMIT_EXCEEDED: i32 = 15;

/// The provider answered, also with an error of the service's own (a business exception, a gRPC
/// NOT_FOUND, an HTTP 404): its latency feeds the latency-aware strategies. An outcome is a
/// verdict on the provider, not on the request: docs/outcomes.md maps gRPC and HTTP statuses.
pub const PLB_OUTCOME_SUCCESS: i32 = 0;
/// The provider could not serve (refused, reset, unavailable, overloaded, broken): counted as a
/// failure (peakewma records at least its failure penalty; outlier ejection counts it).
pub const PLB_OUTCOME_FAILURE: i32 = 1;
/// The caller's deadline passed before the answer: a failure that is also counted as a timeout.
pub const PLB_OUTCOME_TIMEOUT: i32 = 2;
/// The call was never sent, or was given up with no verdict on the provider (cancelled by its
/// caller): only its in-flight count is undone; no latency, not a failure.
pub const PLB_OUTCOME_CANCELLED: i32 = 3;

/// A balancer. Opaque; every function taking `const plb_balancer *` is safe to call from many
/// threads at once.
pub struct plb_balancer {
    _private: [u8; 0],
}

/// One provider, borrowed for the duration of plb_balancer_update (which copies it).
#[repr(C)]
pub struct plb_invoker {
    /// Stable identity, unique in the set, at most INT64_MAX.
    pub id: u64,
    /// UTF-8 `host:port`, not NUL-terminated; places the invoker on the consistent-hash ring (an
    /// empty one is PLB_ERR_INVALID_ARGUMENT for the hashing strategies).
    pub address: *const u8,
    /// Length of `address` in bytes.
    pub address_len: usize,
    /// At least 0 (Dubbo's default is 100).
    pub weight: i32,
    /// Provider start time, Unix ms; 0 or less = unknown (no warm-up).
    pub start_time_ms: i64,
    /// Warm-up period in ms; negative = the balancer's `warmup` (default 600000).
    pub warmup_ms: i32,
    /// Optional UTF-8 zone; (NULL, 0) for none.
    pub zone: *const u8,
    /// Length of `zone` in bytes; 0 = no zone (`zone` is then not read).
    pub zone_len: usize,
}

fn guard<T>(on_panic: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(on_panic)
}

/// `guard` for a call with a message buffer: a caught panic writes its status text and length
/// there too, as every other failure does, so a caller that prints `err` on any failure never
/// reads a buffer the call left unwritten (or unterminated).
unsafe fn guard_with_message(
    err: *mut c_char,
    err_cap: usize,
    err_len: *mut usize,
    body: impl FnOnce() -> i32,
) -> i32 {
    guard(None, || Some(body()))
        .unwrap_or_else(|| fail(Status::Panic.into(), err, err_cap, err_len))
}

unsafe fn balancer<'a>(b: *const plb_balancer) -> Result<&'a Balancer, Status> {
    (b as *const Balancer).as_ref().ok_or(Status::NullPointer)
}

/// The caller's array `(ptr, len)`; NULL only with length 0. A length whose size in bytes is
/// above `isize::MAX` describes no array (typically `(size_t)-1` passed for "unknown"): it is
/// an argument error before anything is read, not a slice Rust must never make.
unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> Result<&'a [T], Status> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Status::NullPointer);
    }
    if len > isize::MAX as usize / std::mem::size_of::<T>() {
        return Err(Status::InvalidArgument);
    }
    Ok(std::slice::from_raw_parts(ptr, len))
}

unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], Status> {
    slice(ptr, len)
}

unsafe fn ids<'a>(ptr: *const u64, len: usize) -> Result<&'a [u64], Status> {
    slice(ptr, len)
}

/// What was wrong with the caller's array `what` of length `len`, for an error message.
fn array_error(status: Status, what: &str, len: usize) -> Error {
    let message = match status {
        Status::NullPointer => format!("{what}: pointer is NULL with length {len}"),
        _ => format!("{what}: length {len} is larger than any array"),
    };
    Error::new(status, message)
}

unsafe fn text<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a str, Error> {
    let b = bytes(ptr, len).map_err(|s| array_error(s, what, len))?;
    std::str::from_utf8(b).map_err(|e| {
        Error::new(
            Status::InvalidUtf8,
            format!("{what} is not valid UTF-8: {e}"),
        )
    })
}

/// Copies `msg` (truncated at a character boundary) plus a NUL into the caller's buffer.
unsafe fn write_message(msg: &str, buf: *mut c_char, cap: usize, len: *mut usize) {
    let mut n = 0;
    if !buf.is_null() && cap > 0 {
        n = msg.len().min(cap - 1);
        while !msg.is_char_boundary(n) {
            n -= 1;
        }
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    if !len.is_null() {
        *len = n;
    }
}

unsafe fn fail(e: Error, err: *mut c_char, err_cap: usize, err_len: *mut usize) -> i32 {
    write_message(&e.message, err, err_cap, err_len);
    e.status.code()
}

/// Creates a balancer from a config string of Dubbo URL parameters
/// (`loadbalance=roundrobin&warmup=600000`; empty = `random` with Dubbo's defaults).
/// On success writes the handle to `*out`; on failure leaves it untouched and, if `err` is not
/// NULL, writes a NUL-terminated message (truncated to `err_cap`) and its length to `*err_len`.
#[no_mangle]
pub unsafe extern "C" fn plb_balancer_new(
    config: *const u8,
    config_len: usize,
    out: *mut *mut plb_balancer,
    err: *mut c_char,
    err_cap: usize,
    err_len: *mut usize,
) -> i32 {
    guard_with_message(err, err_cap, err_len, || {
        let result = (|| {
            if out.is_null() {
                return Err(Error::new(Status::NullPointer, "out is NULL"));
            }
            let config = text(config, config_len, "config")?;
            Balancer::new(config)
        })();
        match result {
            Ok(b) => {
                *out = Box::into_raw(Box::new(b)) as *mut plb_balancer;
                write_message("", err, err_cap, err_len);
                PLB_OK
            }
            Err(e) => fail(e, err, err_cap, err_len),
        }
    })
}

/// Frees a balancer. NULL is a no-op. Call it once, after every other call on it has returned.
///
/// Each thread keeps the invoker set it last used of up to 64 balancers (so that a call needs no
/// reference counting). The free releases every set of the balancer at once, those that other
/// threads cached included, with their invokers' state; each such thread keeps only an empty
/// set (at most 272 bytes) in its slot until another balancer takes the slot or it exits.
#[no_mangle]
pub unsafe extern "C" fn plb_balancer_free(b: *mut plb_balancer) {
    guard((), || {
        if !b.is_null() {
            drop(Box::from_raw(b as *mut Balancer));
        }
    })
}

/// Replaces the whole invoker set atomically (the array and its strings are copied). State of
/// ids that stay is kept. A rejected set changes nothing. An empty set is accepted: selects then
/// fail with PLB_ERR_NO_PROVIDER.
///
/// The replaced set is freed once no thread holds it: the calling thread drops its cached copy
/// here; another thread's copy goes at its next call on this balancer, when another balancer
/// takes its slot, when it exits, or at plb_balancer_free, whichever comes first. Updating to an
/// empty set therefore releases the state of a balancer that is no longer used while other
/// threads may still hold its handle, except the copies other threads cached (until one of
/// those) and `roundrobin`'s counters, which Dubbo keeps for invokers that come back (8 bytes
/// per method used and invoker, about 20 where a method's counters were not at a place in the
/// set's own period);
/// the bindings' close() does this and leaves the free to their garbage collector, so
/// that a call racing close() never reaches freed memory.
#[no_mangle]
pub unsafe extern "C" fn plb_balancer_update(
    b: *const plb_balancer,
    invokers: *const plb_invoker,
    n: usize,
    err: *mut c_char,
    err_cap: usize,
    err_len: *mut usize,
) -> i32 {
    guard_with_message(err, err_cap, err_len, || {
        let result = (|| {
            let b = balancer(b).map_err(|s| Error::new(s, "balancer is NULL"))?;
            let raw = slice(invokers, n).map_err(|s| array_error(s, "invokers", n))?;
            let mut set = Vec::with_capacity(n);
            for (i, r) in raw.iter().enumerate() {
                let address = text(r.address, r.address_len, &format!("invoker #{i} address"))?;
                let zone = if r.zone_len == 0 {
                    None
                } else {
                    Some(text(r.zone, r.zone_len, &format!("invoker #{i} zone"))?.to_owned())
                };
                set.push(Invoker {
                    id: r.id,
                    address: address.to_owned(),
                    weight: r.weight,
                    start_time_ms: r.start_time_ms,
                    warmup_ms: r.warmup_ms,
                    zone,
                });
            }
            b.update(&set)
        })();
        match result {
            Ok(()) => {
                write_message("", err, err_cap, err_len);
                PLB_OK
            }
            Err(e) => fail(e, err, err_cap, err_len),
        }
    })
}

/// Interns a method name and writes its id to `*out_method`. The empty name is id 0 (the
/// service level). Per-method state (counters, round-robin position) is kept per id.
#[no_mangle]
pub unsafe extern "C" fn plb_balancer_method(
    b: *const plb_balancer,
    name: *const u8,
    name_len: usize,
    out_method: *mut u32,
) -> i32 {
    guard(PLB_ERR_PANIC, || {
        let result = (|| {
            let b = balancer(b)?;
            if out_method.is_null() {
                return Err(Status::NullPointer);
            }
            let name = text(name, name_len, "method name").map_err(|e| e.status)?;
            b.method(name).map_err(|e| e.status)
        })();
        match result {
            Ok(id) => {
                *out_method = id;
                PLB_OK
            }
            Err(s) => s.code(),
        }
    })
}

/// Writes a JSON snapshot of the set and its counters (effective weights at `now_us`) plus a
/// NUL. If it does not fit, returns PLB_ERR_BUFFER_TOO_SMALL with the needed length in `*len`.
/// The next call may need more (calls and updates meanwhile; with `now_us` 0, the library's
/// clock moving time-dependent fields): call again until it fits. On any failure a non-NULL
/// `buf` with `cap` > 0 holds the empty string.
#[no_mangle]
pub unsafe extern "C" fn plb_balancer_stats(
    b: *const plb_balancer,
    now_us: i64,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> i32 {
    guard(PLB_ERR_PANIC, || {
        // Never leave the caller a stale or unterminated string, whatever the failure.
        if !buf.is_null() && cap > 0 {
            *buf = 0;
        }
        let Ok(b) = balancer(b) else {
            return PLB_ERR_NULL_POINTER;
        };
        if len.is_null() || (buf.is_null() && cap > 0) {
            return PLB_ERR_NULL_POINTER;
        }
        let json = b.stats_json(now_us);
        *len = json.len();
        if json.len() >= cap {
            return PLB_ERR_BUFFER_TOO_SMALL;
        }
        std::ptr::copy_nonoverlapping(json.as_ptr(), buf.cast::<u8>(), json.len());
        *buf.add(json.len()) = 0;
        PLB_OK
    })
}

/// Picks an invoker for one call of `method` and counts the call as in flight until
/// plb_report. `key` is the hash key of `consistenthash`, `boundedhash`, `maglev` and
/// `rendezvous` (ignored by other strategies; may be NULL with length 0). Returns the invoker id (>= 0) or a negated status.
/// Never allocates in steady state.
#[no_mangle]
pub unsafe extern "C" fn plb_select(
    b: *const plb_balancer,
    method: u32,
    key: *const u8,
    key_len: usize,
    now_us: i64,
) -> i64 {
    guard(-(PLB_ERR_PANIC as i64), || {
        let result = (|| {
            let b = balancer(b)?;
            let key = bytes(key, key_len)?;
            b.select(method, key, now_us)
        })();
        match result {
            Ok(id) => id as i64,
            Err(s) => -(s.code() as i64),
        }
    })
}

/// plb_select over a subset: `candidates` (NULL/0 = the whole set; each must be in the set) minus
/// `excluded` (ids already tried by a failover; unknown ones are ignored). Every strategy scans in
/// set order; a subset is only a membership filter. If nothing is left: -PLB_ERR_NO_CANDIDATE.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn plb_select_among(
    b: *const plb_balancer,
    method: u32,
    key: *const u8,
    key_len: usize,
    candidates: *const u64,
    n_candidates: usize,
    excluded: *const u64,
    n_excluded: usize,
    now_us: i64,
) -> i64 {
    guard(-(PLB_ERR_PANIC as i64), || {
        let result = (|| {
            let b = balancer(b)?;
            let key = bytes(key, key_len)?;
            let candidates = ids(candidates, n_candidates)?;
            let excluded = ids(excluded, n_excluded)?;
            b.select_among(method, key, candidates, excluded, now_us)
        })();
        match result {
            Ok(id) => id as i64,
            Err(s) => -(s.code() as i64),
        }
    })
}

/// Ends a call: `elapsed_us` (>= 0) and a PLB_OUTCOME_* value. A report for an id no longer in
/// the set is accepted and ignored; in-flight counts never go below 0.
#[no_mangle]
pub unsafe extern "C" fn plb_report(
    b: *const plb_balancer,
    method: u32,
    id: u64,
    elapsed_us: i64,
    outcome: i32,
    now_us: i64,
) -> i32 {
    guard(PLB_ERR_PANIC, || {
        let result = (|| {
            let b = balancer(b)?;
            let outcome = Outcome::from_code(outcome).ok_or(Status::UnknownOutcome)?;
            b.report(method, id, elapsed_us, outcome, now_us)
        })();
        result.map_or_else(|s| s.code(), |()| PLB_OK)
    })
}

/// plb_select over the whole set at the library's clock, for callers whose FFI pays for each
/// declared argument (Python's ctypes: 70-150 ns per argument with `argtypes`): every parameter
/// is a pointer or a 32-bit integer, so such a caller can pass its arguments undeclared. Same
/// result as plb_select(b, method, key, key_len, 0).
#[no_mangle]
pub unsafe extern "C" fn plb_select32(
    b: *const plb_balancer,
    method: u32,
    key: *const u8,
    key_len: u32,
) -> i64 {
    plb_select(b, method, key, key_len as usize, 0)
}

/// plb_report at the library's clock with the id in two halves, `(id_high << 32) | id_low`,
/// and `elapsed_us` as an unsigned 32-bit value (up to about 71 minutes), for the callers of
/// plb_select32. Same result as plb_report(b, method, id, elapsed_us, outcome, 0).
#[no_mangle]
pub unsafe extern "C" fn plb_report32(
    b: *const plb_balancer,
    method: u32,
    id_high: u32,
    id_low: u32,
    elapsed_us: u32,
    outcome: i32,
) -> i32 {
    let id = (u64::from(id_high) << 32) | u64::from(id_low);
    plb_report(b, method, id, i64::from(elapsed_us), outcome, 0)
}

/// Provider-side metrics for `adaptive` (what a Dubbo provider returns in its `lb_adaptive`
/// attachment): the provider's clock in ms (>= 0), its CPU load (finite, >= 0) and the call's
/// response time (>= 0); other values return PLB_ERR_INVALID_ARGUMENT.
/// Reports older than the last one are ignored. Other strategies accept and ignore them.
#[no_mangle]
pub unsafe extern "C" fn plb_report_provider_metrics(
    b: *const plb_balancer,
    method: u32,
    id: u64,
    provider_time_ms: i64,
    cpu_load: f64,
    rt_us: i64,
    now_us: i64,
) -> i32 {
    guard(PLB_ERR_PANIC, || {
        let result = (|| {
            let b = balancer(b)?;
            b.report_provider_metrics(method, id, provider_time_ms, cpu_load, rt_us, now_us)
        })();
        result.map_or_else(|s| s.code(), |()| PLB_OK)
    })
}

/// A provider's load report for `orca` (ORCA's numbers, from a call's trailers or out of band)
/// for invoker `id`: queries per second it served (`qps`), of them failed (`eps`, at most
/// `qps`), and its utilization (CPU or the application's own, 1.0 = full); each finite and not
/// negative, else PLB_ERR_INVALID_ARGUMENT. `now_us` = 0 reads the library's clock. Kept per
/// invoker, not per method. Other strategies, and ids not in the set, accept and ignore them.
#[no_mangle]
pub unsafe extern "C" fn plb_report_load(
    b: *const plb_balancer,
    id: u64,
    qps: f64,
    eps: f64,
    utilization: f64,
    now_us: i64,
) -> i32 {
    guard(PLB_ERR_PANIC, || {
        let result = (|| {
            let b = balancer(b)?;
            let report = crate::LoadReport {
                qps,
                eps,
                utilization,
            };
            b.report_load(id, report, now_us)
        })();
        result.map_or_else(|s| s.code(), |()| PLB_OK)
    })
}

/// Invoker `id`'s connection was established again (a gRPC subchannel READY after another
/// state). Under `orca` the invoker's run of load reports restarts, as gRFC A58 does: its
/// weight stops counting at the next pick and its next report starts a new blackout
/// (`orca.blackoutMs`), for the server behind a reconnect may be a restarted, cold process.
/// `now_us` = 0 reads the library's clock (the restart does not depend on it). Other strategies,
/// and ids not in the set, accept and ignore it.
#[no_mangle]
pub unsafe extern "C" fn plb_report_reconnect(b: *const plb_balancer, id: u64, now_us: i64) -> i32 {
    guard(PLB_ERR_PANIC, || {
        let result = (|| balancer(b)?.report_reconnect(id, now_us))();
        result.map_or_else(|s| s.code(), |()| PLB_OK)
    })
}

/// Static text for any status value, positive or negated (as plb_select returns it). Never NULL.
#[no_mangle]
pub extern "C" fn plb_status_str(status: i32) -> *const c_char {
    let text = match Status::from_code(status) {
        Some(s) => s.message_nul(),
        None => "unknown status code\0",
    };
    CStr::from_bytes_with_nul(text.as_bytes()).map_or(std::ptr::null(), |c| c.as_ptr())
}

/// The library version, e.g. "0.1.0" (static, NUL-terminated).
#[no_mangle]
pub extern "C" fn plb_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// PLB_ABI_VERSION of the loaded library.
#[no_mangle]
pub extern "C" fn plb_abi_version() -> u32 {
    PLB_ABI_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_panic_writes_its_message_like_any_failure() {
        let mut buf = [b'X' as c_char; 16];
        let mut len = 12345;
        // SAFETY: `buf` and `len` are live locals of the sizes passed.
        let status = unsafe {
            guard_with_message(buf.as_mut_ptr(), buf.len(), &mut len, || {
                panic!("a bug inside polylb (this test's own)")
            })
        };
        assert_eq!(status, PLB_ERR_PANIC);
        let text = Status::Panic.message().as_bytes();
        assert_eq!(
            len,
            buf.len() - 1,
            "the text truncated to the buffer, NUL excluded"
        );
        let written: Vec<u8> = buf[..len].iter().map(|c| c.to_ne_bytes()[0]).collect();
        assert_eq!(written, &text[..len]);
        assert_eq!(buf[len], 0);
    }
}
