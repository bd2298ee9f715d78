//! JNI glue between `io.polylb.Native` (Java) and the polylb core.
//!
//! Thin by design: marshal arguments, own the handle, map errors to status codes. Every export
//! runs inside `catch_unwind` so that a bug in polylb becomes `Status::Panic` on the Java side
//! instead of unwinding into the JVM (undefined behaviour, in practice an abort).
//!
//! Conventions shared with `Native.java`:
//! - A balancer handle is `Box<Balancer>` turned into a `jlong`; 0 is "no balancer" and is
//!   answered with `NullPointer` rather than dereferenced. Java frees it exactly once.
//! - Hot calls (`select*`, `report*`, `method`) return a value `>= 0` or `-status`, and only use
//!   the raw JNI function table to copy primitive arrays into stack buffers: no allocation and
//!   no exception checks for arrays that fit (Java validates offsets and lengths beforehand).
//! - Cold calls (`create`, `update`) return a status and put the library's message into
//!   `messageOut[0]`, so Java can throw an exception carrying both.

// Every `unsafe` says why it holds (`// SAFETY:`); clippy keeps it so.
#![warn(clippy::undocumented_unsafe_blocks)]

use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};

use jni::objects::{JByteArray, JClass, JIntArray, JLongArray, JObjectArray, JString};
use jni::strings::JNIString;
use jni::sys::{jbyteArray, jclass, jdouble, jint, jlong, jlongArray, jsize, jstring};
use jni::JNIEnv;
use polylb::{Balancer, Invoker, Outcome, Status};

/// Must match `Native.ABI_VERSION`; bumped whenever a native signature or convention changes.
const JNI_ABI_VERSION: jint = 4;

/// Keys and id lists up to these sizes are copied to the stack; longer ones go to the heap.
const STACK_KEY_BYTES: usize = 512;
const STACK_IDS: usize = 256;

fn status_code(status: Status) -> jint {
    status.code()
}

fn neg(status: Status) -> jlong {
    -(status.code() as jlong)
}

/// Borrows the balancer behind a handle. Safety: the handle came from `create` and Java has not
/// freed it yet (the Java wrapper documents "close after all calls return").
unsafe fn balancer<'a>(handle: jlong) -> Option<&'a Balancer> {
    (handle as *const Balancer).as_ref()
}

/// Runs `body`, turning a panic into `on_panic`.
fn guarded<T>(on_panic: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(on_panic)
}

/// Runs `body` on the balancer behind `handle` and returns 0 or its status code (NullPointer for
/// a 0 handle, Panic for a panic): the shape of every report call.
fn status_of(handle: jlong, body: impl FnOnce(&Balancer) -> Result<(), Status>) -> jint {
    guarded(status_code(Status::Panic), || {
        // SAFETY: `handle` is 0 or a live handle from `create` (the Java wrapper's contract).
        let Some(balancer) = (unsafe { balancer(handle) }) else {
            return status_code(Status::NullPointer);
        };
        match body(balancer) {
            Ok(()) => status_code(Status::Ok),
            Err(status) => status_code(status),
        }
    })
}

/// Runs `text` on the balancer behind `handle` and returns it as a Java string; null when the
/// handle is 0, the JVM could not make the string, or polylb panicked.
fn string_of<S: Into<JNIString>>(
    env: &JNIEnv<'_>,
    handle: jlong,
    text: impl FnOnce(&Balancer) -> S,
) -> jstring {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: `handle` is 0 or a live handle from `create` (the Java wrapper's contract).
        let Some(balancer) = (unsafe { balancer(handle) }) else {
            return std::ptr::null_mut();
        };
        env.new_string(text(balancer))
            .map(JString::into_raw)
            .unwrap_or(std::ptr::null_mut())
    })
}

/// Copies `len` elements of a Java primitive array into a stack buffer of `N` elements (or a
/// Vec when longer) through `copy(destination, len)`, then passes the slice to `f`. Callers pass
/// `len` = 0 for a null array; Java validated `len` against the array's length.
unsafe fn with_region<T: Copy, R, const N: usize>(
    len: jint,
    copy: impl FnOnce(*mut T, jsize),
    f: impl FnOnce(&[T]) -> R,
) -> R {
    let len = len.max(0) as usize;
    if len == 0 {
        f(&[])
    } else if len <= N {
        let mut buf: [MaybeUninit<T>; N] = [MaybeUninit::uninit(); N];
        copy(buf.as_mut_ptr() as *mut T, len as jsize);
        // Safety: the JVM wrote exactly `len` elements.
        f(std::slice::from_raw_parts(buf.as_ptr() as *const T, len))
    } else {
        let mut buf: Vec<T> = Vec::with_capacity(len);
        copy(buf.as_mut_ptr(), len as jsize);
        buf.set_len(len);
        f(&buf)
    }
}

/// `with_region` for a `byte[]` (the hash key).
unsafe fn with_bytes<R>(
    env: *mut jni::sys::JNIEnv,
    array: jbyteArray,
    len: jint,
    f: impl FnOnce(&[u8]) -> R,
) -> R {
    let len = if array.is_null() { 0 } else { len };
    with_region::<u8, R, STACK_KEY_BYTES>(
        len,
        |dst, n| {
            ((**env).GetByteArrayRegion.unwrap())(env, array, 0, n, dst as *mut jni::sys::jbyte)
        },
        f,
    )
}

/// `with_region` for a `long[]` of invoker ids (reinterpreted as u64, as the core expects).
unsafe fn with_ids<R>(
    env: *mut jni::sys::JNIEnv,
    array: jlongArray,
    len: jint,
    f: impl FnOnce(&[u64]) -> R,
) -> R {
    let len = if array.is_null() { 0 } else { len };
    with_region::<u64, R, STACK_IDS>(
        len,
        |dst, n| ((**env).GetLongArrayRegion.unwrap())(env, array, 0, n, dst as *mut jlong),
        f,
    )
}

// ---------------------------------------------------------------------------------------------
// Library information
// ---------------------------------------------------------------------------------------------

#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_abiVersion(_env: JNIEnv, _class: JClass) -> jint {
    JNI_ABI_VERSION
}

#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_version(env: JNIEnv, _class: JClass) -> jstring {
    guarded(std::ptr::null_mut(), || {
        // The core library's version (plb_version), not this glue crate's.
        // SAFETY: plb_version returns a static NUL-terminated string.
        let version = unsafe { std::ffi::CStr::from_ptr(polylb::ffi::plb_version()) };
        env.new_string(version.to_string_lossy())
            .map(JString::into_raw)
            .unwrap_or(std::ptr::null_mut())
    })
}

/// The library's static text for a status code (either sign); null for an unknown code.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_statusMessage(
    env: JNIEnv,
    _class: JClass,
    code: jint,
) -> jstring {
    guarded(std::ptr::null_mut(), || match Status::from_code(code) {
        Some(status) => env
            .new_string(status.message())
            .map(JString::into_raw)
            .unwrap_or(std::ptr::null_mut()),
        None => std::ptr::null_mut(),
    })
}

// ---------------------------------------------------------------------------------------------
// Cold calls: lifecycle and set updates
// ---------------------------------------------------------------------------------------------

fn put_message(env: &mut JNIEnv, message_out: &JObjectArray, message: &str) {
    if message_out.is_null() {
        return;
    }
    if let Ok(text) = env.new_string(message) {
        let _ = env.set_object_array_element(message_out, 0, &text);
        let _ = env.delete_local_ref(text);
    }
}

/// Reads a Java string as UTF-8; `what` names it in an error's message (only made then: an
/// update reads two strings per invoker).
fn read_string(
    env: &mut JNIEnv,
    value: &JString,
    what: impl Fn() -> String,
) -> Result<String, (Status, String)> {
    if value.is_null() {
        return Err((Status::NullPointer, format!("{} is null", what())));
    }
    // Safety: the Java side declares these as String / String[] elements, so `value` is a
    // java.lang.String (the checked `get_string` would add a class lookup per element).
    let java_str = unsafe { env.get_string_unchecked(value) }.map_err(|_| {
        (
            Status::InvalidUtf8,
            format!("could not read {} from Java", what()),
        )
    })?;
    // Java hands out modified UTF-8. A lone surrogate has no UTF-8 form: strictly decoded it is
    // an error, as the other bindings make it (a lossy decode would turn it into U+FFFD and
    // place an invoker under an address no other language can name).
    let modified = java_str.to_bytes();
    match cesu8::from_java_cesu8(modified) {
        Ok(text) => Ok(text.into_owned()),
        Err(_) => Err((Status::InvalidUtf8, not_utf8_message(modified, &what()))),
    }
}

/// The core's message for text that is not UTF-8 (`{what} is not valid UTF-8: {error}`), for the
/// bytes C and Go would pass for this text and Python does: each lone surrogate as its three
/// bytes, everything else as UTF-8, so that the error's byte index is the same in every
/// language.
fn not_utf8_message(modified_utf8: &[u8], what: &str) -> String {
    // Modified UTF-8 holds UTF-16 units of one to three bytes each (a NUL as two).
    let mut units = Vec::with_capacity(modified_utf8.len());
    let mut bytes = modified_utf8.iter().map(|&b| u16::from(b));
    while let Some(b) = bytes.next() {
        let mut next = || bytes.next().unwrap_or(0) & 0x3F;
        units.push(match b {
            0..=0x7F => b,
            0xC0..=0xDF => ((b & 0x1F) << 6) | next(),
            _ => ((b & 0x0F) << 12) | (next() << 6) | next(),
        });
    }
    let mut text = Vec::with_capacity(modified_utf8.len());
    for unit in char::decode_utf16(units) {
        match unit {
            Ok(c) => text.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            Err(lone) => {
                let u = lone.unpaired_surrogate();
                text.extend_from_slice(&[
                    0xE0 | (u >> 12) as u8,
                    0x80 | ((u >> 6) & 0x3F) as u8,
                    0x80 | (u & 0x3F) as u8,
                ]);
            }
        }
    }
    match std::str::from_utf8(&text) {
        Err(error) => format!("{what} is not valid UTF-8: {error}"),
        Ok(_) => format!("{what} is not valid UTF-8"),
    }
}

/// Reads element `index` of a `String[]`; `Ok(None)` for a null element.
fn read_string_element(
    env: &mut JNIEnv,
    array: &JObjectArray,
    index: usize,
    what: impl Fn() -> String,
) -> Result<Option<String>, (Status, String)> {
    let element = env
        .get_object_array_element(array, index as jsize)
        .map_err(|_| {
            (
                Status::InvalidArgument,
                format!("could not read {} from Java", what()),
            )
        })?;
    if element.is_null() {
        return Ok(None);
    }
    let element = JString::from(element);
    let text = read_string(env, &element, what);
    // Large sets would otherwise overflow the native frame's local reference capacity.
    let _ = env.delete_local_ref(element);
    text.map(Some)
}

/// `create(config, handleOut, messageOut)`: status; on success `handleOut[0]` holds the handle.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_create<'local>(
    mut env: JNIEnv<'local>,
    _class: JClass<'local>,
    config: JString<'local>,
    handle_out: JLongArray<'local>,
    message_out: JObjectArray<'local>,
) -> jint {
    guarded(status_code(Status::Panic), || {
        if handle_out.is_null() {
            return status_code(Status::NullPointer);
        }
        let config = match read_string(&mut env, &config, || "config".to_owned()) {
            Ok(c) => c,
            Err((status, message)) => {
                put_message(&mut env, &message_out, &message);
                return status_code(status);
            }
        };
        match Balancer::new(&config) {
            Ok(balancer) => {
                let handle = Box::into_raw(Box::new(balancer)) as jlong;
                if env
                    .set_long_array_region(&handle_out, 0, &[handle])
                    .is_err()
                {
                    // Safety: the pointer was created just above and never shared.
                    drop(unsafe { Box::from_raw(handle as *mut Balancer) });
                    return status_code(Status::InvalidArgument);
                }
                status_code(Status::Ok)
            }
            Err(error) => {
                put_message(&mut env, &message_out, &error.message);
                status_code(error.status)
            }
        }
    })
}

/// Frees a handle from `create`. 0 is a no-op; Java guarantees it frees each handle once.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_free(_env: JNIEnv, _class: JClass, handle: jlong) {
    if handle != 0 {
        guarded((), || {
            // SAFETY: `handle` came from `create`'s `Box::into_raw`, and Java frees it once.
            drop(unsafe { Box::from_raw(handle as *mut Balancer) })
        });
    }
}

/// `update(handle, ids, addresses, weights, startTimesMs, warmupsMs, zones, messageOut)`:
/// parallel arrays of one length (checked in Java); `zones` may be null or hold nulls.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_polylb_Native_update<'local>(
    mut env: JNIEnv<'local>,
    _class: JClass<'local>,
    handle: jlong,
    ids: JLongArray<'local>,
    addresses: JObjectArray<'local>,
    weights: JIntArray<'local>,
    start_times_ms: JLongArray<'local>,
    warmups_ms: JIntArray<'local>,
    zones: JObjectArray<'local>,
    message_out: JObjectArray<'local>,
) -> jint {
    guarded(status_code(Status::Panic), || {
        // SAFETY: `handle` is 0 or a live handle from `create` (the Java wrapper's contract).
        let Some(balancer) = (unsafe { balancer(handle) }) else {
            return status_code(Status::NullPointer);
        };
        match read_invokers(
            &mut env,
            &ids,
            &addresses,
            &weights,
            &start_times_ms,
            &warmups_ms,
            &zones,
        ) {
            Ok(invokers) => match balancer.update(&invokers) {
                Ok(()) => status_code(Status::Ok),
                Err(error) => {
                    let message = match error.status {
                        Status::IdOutOfRange => out_of_range_message(&invokers),
                        _ => None,
                    };
                    put_message(
                        &mut env,
                        &message_out,
                        message.as_deref().unwrap_or(&error.message),
                    );
                    status_code(error.status)
                }
            },
            Err((status, message)) => {
                put_message(&mut env, &message_out, &message);
                status_code(status)
            }
        }
    })
}

/// The core rejected an id above INT64_MAX: the first such invoker (it stops at the first error
/// and checks each invoker's id first). Java passed it as a negative long, so name it as written,
/// not as the u64 it reinterprets to.
fn out_of_range_message(invokers: &[Invoker]) -> Option<String> {
    let (i, invoker) = invokers
        .iter()
        .enumerate()
        .find(|(_, invoker)| invoker.id > i64::MAX as u64)?;
    Some(format!(
        "invoker #{i}: id {} is outside 0..{}",
        invoker.id as i64,
        i64::MAX
    ))
}

fn read_invokers(
    env: &mut JNIEnv,
    ids: &JLongArray,
    addresses: &JObjectArray,
    weights: &JIntArray,
    start_times_ms: &JLongArray,
    warmups_ms: &JIntArray,
    zones: &JObjectArray,
) -> Result<Vec<Invoker>, (Status, String)> {
    let jni_failed = |what: &str| {
        (
            Status::InvalidArgument,
            format!("could not read {what} from Java"),
        )
    };
    if ids.is_null()
        || addresses.is_null()
        || weights.is_null()
        || start_times_ms.is_null()
        || warmups_ms.is_null()
    {
        return Err((Status::NullPointer, "an invoker array is null".to_owned()));
    }
    let n = env.get_array_length(ids).map_err(|_| jni_failed("ids"))? as usize;
    for (name, len) in [
        ("addresses", env.get_array_length(addresses)),
        ("weights", env.get_array_length(weights)),
        ("startTimesMs", env.get_array_length(start_times_ms)),
        ("warmupsMs", env.get_array_length(warmups_ms)),
        (
            "zones",
            if zones.is_null() {
                Ok(n as jsize)
            } else {
                env.get_array_length(zones)
            },
        ),
    ] {
        if len.map_err(|_| jni_failed(name))? as usize != n {
            return Err((
                Status::InvalidArgument,
                format!("{name} has a different length than ids"),
            ));
        }
    }
    let mut id_values = vec![0 as jlong; n];
    let mut weight_values = vec![0 as jint; n];
    let mut start_values = vec![0 as jlong; n];
    let mut warmup_values = vec![0 as jint; n];
    env.get_long_array_region(ids, 0, &mut id_values)
        .map_err(|_| jni_failed("ids"))?;
    env.get_int_array_region(weights, 0, &mut weight_values)
        .map_err(|_| jni_failed("weights"))?;
    env.get_long_array_region(start_times_ms, 0, &mut start_values)
        .map_err(|_| jni_failed("startTimesMs"))?;
    env.get_int_array_region(warmups_ms, 0, &mut warmup_values)
        .map_err(|_| jni_failed("warmupsMs"))?;

    let mut invokers = Vec::with_capacity(n);
    for i in 0..n {
        // A negative long reinterprets to an id above INT64_MAX, which the core rejects at its
        // own place in its in-order check (as it does for C and Go); see out_of_range_message.
        let id = id_values[i] as u64;
        // Named as the core names them, so the message is the one C, Go and Python get.
        let address =
            match read_string_element(env, addresses, i, || format!("invoker #{i} address")) {
                Ok(Some(address)) => address,
                Ok(None) => {
                    return Err((
                        Status::NullPointer,
                        format!("address of invoker {i} (id {}) is null", id_values[i]),
                    ))
                }
                Err(error) => return Err(error),
            };
        let mut invoker = Invoker::new(id, address)
            .weight(weight_values[i])
            .start_time_ms(start_values[i])
            .warmup_ms(warmup_values[i]);
        if !zones.is_null() {
            match read_string_element(env, zones, i, || format!("invoker #{i} zone")) {
                // An empty zone is no zone, as a zero-length one is in the C ABI.
                Ok(Some(zone)) if !zone.is_empty() => invoker = invoker.zone(zone),
                Ok(_) => {}
                Err(error) => return Err(error),
            }
        }
        invokers.push(invoker);
    }
    Ok(invokers)
}

/// Interns a method name given as UTF-8 bytes; returns its id or `-status`.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_method<'local>(
    env: JNIEnv<'local>,
    _class: JClass<'local>,
    handle: jlong,
    name_utf8: JByteArray<'local>,
) -> jlong {
    guarded(neg(Status::Panic), || {
        // SAFETY: `handle` is 0 or a live handle from `create` (the Java wrapper's contract).
        let Some(balancer) = (unsafe { balancer(handle) }) else {
            return neg(Status::NullPointer);
        };
        let bytes = if name_utf8.is_null() {
            Vec::new()
        } else {
            match env.convert_byte_array(&name_utf8) {
                Ok(b) => b,
                Err(_) => return neg(Status::InvalidArgument),
            }
        };
        let Ok(name) = std::str::from_utf8(&bytes) else {
            return neg(Status::InvalidUtf8);
        };
        match balancer.method(name) {
            Ok(id) => id as jlong,
            Err(error) => neg(error.status),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Hot calls: primitives in, primitives out
// ---------------------------------------------------------------------------------------------

fn select_result(result: Result<u64, Status>) -> jlong {
    match result {
        // The core guarantees ids <= INT64_MAX (update rejects larger ones).
        Ok(id) => id as jlong,
        Err(status) => neg(status),
    }
}

/// `select(handle, method, key, keyLength, nowUs)`: an id `>= 0` or `-status`. `key` may be null.
///
/// # Safety
/// Called by the JVM only: `env` is the current thread's JNIEnv, `key` a `byte[]` of at least
/// `keyLength` elements (checked in Java) and `handle` 0 or a live handle from `create`.
#[no_mangle]
pub unsafe extern "system" fn Java_io_polylb_Native_select(
    env: *mut jni::sys::JNIEnv,
    _class: jclass,
    handle: jlong,
    method: jint,
    key: jbyteArray,
    key_length: jint,
    now_us: jlong,
) -> jlong {
    // SAFETY: the JVM's contract for this export (above): a live `env`, arrays at least as long
    // as their counts, `handle` 0 or live.
    guarded(neg(Status::Panic), || unsafe {
        let Some(balancer) = balancer(handle) else {
            return neg(Status::NullPointer);
        };
        with_bytes(env, key, key_length, |key_bytes| {
            select_result(balancer.select(method as u32, key_bytes, now_us))
        })
    })
}

/// `selectPackedKey(handle, method, keyLow, keyHigh, keyLength, nowUs)`: as `select` with a key
/// of at most 16 bytes passed in two longs (little-endian: byte `i` is bits `8 * (i % 8)` of the
/// first or second long), so that a short key crosses without a JNI array access.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_selectPackedKey(
    _env: *mut jni::sys::JNIEnv,
    _class: jclass,
    handle: jlong,
    method: jint,
    key_low: jlong,
    key_high: jlong,
    key_length: jint,
    now_us: jlong,
) -> jlong {
    guarded(neg(Status::Panic), || {
        // SAFETY: `handle` is 0 or a live handle from `create` (the Java wrapper's contract).
        let Some(balancer) = (unsafe { balancer(handle) }) else {
            return neg(Status::NullPointer);
        };
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&key_low.to_le_bytes());
        bytes[8..].copy_from_slice(&key_high.to_le_bytes());
        let len = (key_length.max(0) as usize).min(bytes.len());
        select_result(balancer.select(method as u32, &bytes[..len], now_us))
    })
}

/// `selectAmong(handle, method, key, keyLength, candidates, candidateCount, excluded,
/// excludedCount, nowUs)`: as `select`, restricted to the first `candidateCount` ids of
/// `candidates` (0 = the whole set) and avoiding the first `excludedCount` ids of `excluded`.
///
/// # Safety
/// As `select`; each count is at most its array's length (checked in Java).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "system" fn Java_io_polylb_Native_selectAmong(
    env: *mut jni::sys::JNIEnv,
    _class: jclass,
    handle: jlong,
    method: jint,
    key: jbyteArray,
    key_length: jint,
    candidates: jlongArray,
    candidate_count: jint,
    excluded: jlongArray,
    excluded_count: jint,
    now_us: jlong,
) -> jlong {
    // SAFETY: the JVM's contract for this export (above): a live `env`, arrays at least as long
    // as their counts, `handle` 0 or live.
    guarded(neg(Status::Panic), || unsafe {
        let Some(balancer) = balancer(handle) else {
            return neg(Status::NullPointer);
        };
        with_bytes(env, key, key_length, |key_bytes| {
            with_ids(env, candidates, candidate_count, |candidate_ids| {
                with_ids(env, excluded, excluded_count, |excluded_ids| {
                    select_result(balancer.select_among(
                        method as u32,
                        key_bytes,
                        candidate_ids,
                        excluded_ids,
                        now_us,
                    ))
                })
            })
        })
    })
}

/// `report(handle, method, id, elapsedUs, outcome, nowUs)`: 0 or a status code.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_report(
    _env: *mut jni::sys::JNIEnv,
    _class: jclass,
    handle: jlong,
    method: jint,
    id: jlong,
    elapsed_us: jlong,
    outcome: jint,
    now_us: jlong,
) -> jint {
    status_of(handle, |balancer| {
        let outcome = Outcome::from_code(outcome).ok_or(Status::UnknownOutcome)?;
        balancer.report(method as u32, id as u64, elapsed_us, outcome, now_us)
    })
}

/// `reportProviderMetrics(handle, method, id, providerTimeMs, cpuLoad, rtUs, nowUs)`: what a Dubbo
/// provider returned in its `lb_adaptive` attachment; 0 or a status code.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_polylb_Native_reportProviderMetrics(
    _env: *mut jni::sys::JNIEnv,
    _class: jclass,
    handle: jlong,
    method: jint,
    id: jlong,
    provider_time_ms: jlong,
    cpu_load: jdouble,
    rt_us: jlong,
    now_us: jlong,
) -> jint {
    status_of(handle, |balancer| {
        balancer.report_provider_metrics(
            method as u32,
            id as u64,
            provider_time_ms,
            cpu_load,
            rt_us,
            now_us,
        )
    })
}

/// `reportLoad(handle, id, qps, eps, utilization, nowUs)`: a provider's load report for `orca`
/// (ORCA's numbers, per invoker rather than per method); 0 or a status code.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_reportLoad(
    _env: *mut jni::sys::JNIEnv,
    _class: jclass,
    handle: jlong,
    id: jlong,
    qps: jdouble,
    eps: jdouble,
    utilization: jdouble,
    now_us: jlong,
) -> jint {
    status_of(handle, |balancer| {
        let report = polylb::LoadReport {
            qps,
            eps,
            utilization,
        };
        balancer.report_load(id as u64, report, now_us)
    })
}

/// `reportReconnect(handle, id, nowUs)`: invoker `id`'s connection was established again; under
/// `orca` its run of load reports restarts (a new blackout); 0 or a status code.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_reportReconnect(
    _env: *mut jni::sys::JNIEnv,
    _class: jclass,
    handle: jlong,
    id: jlong,
    now_us: jlong,
) -> jint {
    status_of(handle, |balancer| {
        balancer.report_reconnect(id as u64, now_us)
    })
}

// ---------------------------------------------------------------------------------------------
// Introspection (cold)
// ---------------------------------------------------------------------------------------------

/// The stats JSON at `nowUs`; null only when the handle is 0 or polylb panicked.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_stats<'local>(
    env: JNIEnv<'local>,
    _class: JClass<'local>,
    handle: jlong,
    now_us: jlong,
) -> jstring {
    string_of(&env, handle, |balancer| balancer.stats_json(now_us))
}

/// The strategy's canonical name (e.g. "roundrobin"); null only when the handle is 0.
#[no_mangle]
pub extern "system" fn Java_io_polylb_Native_strategy<'local>(
    env: JNIEnv<'local>,
    _class: JClass<'local>,
    handle: jlong,
) -> jstring {
    string_of(&env, handle, |balancer| balancer.strategy_name())
}
