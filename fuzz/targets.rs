//! The fuzz targets' bodies, shared by the libFuzzer binaries (`fuzz/fuzz_targets/*.rs`) and by
//! the stable-Rust replay in `tests/fuzz_corpus.rs`, so both run exactly the same checks.
//!
//! Each target drives polylb only through its C ABI and checks the documented contract: every
//! status is one the call may return for that input, select answers a current candidate,
//! caller buffers are NUL-terminated and never written past `cap`, and once every select has
//! been reported no call is left in flight. A violated check panics (libFuzzer records a crash).

#![allow(dead_code)]

use polylb::ffi::*;
use std::collections::HashMap;
use std::ptr::{null, null_mut};

/// Every strategy the library knows, Dubbo's six first: new ones are covered as they land.
fn strategies() -> Vec<&'static str> {
    polylb::StrategyKind::ALL.iter().map(|k| k.name()).collect()
}

/// Reads the input front to back; past the end every read is 0, so any input is a program.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    /// The next byte, left to be read.
    fn peek(&self) -> u8 {
        self.data.get(self.pos).copied().unwrap_or(0)
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0u64, |v, _| (v << 8) | self.u8() as u64)
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = (start + n).min(self.data.len());
        self.pos = start + n;
        &self.data[start..end]
    }
}

/// Checks a message the library wrote into a caller buffer of `cap` bytes (`fill` elsewhere).
fn check_message(buf: &[u8], cap: usize, len: usize, fill: u8) {
    if cap == 0 {
        assert_eq!(len, 0, "nothing may be written with cap 0");
    } else {
        assert!(len < cap, "message length {len} with cap {cap}");
        assert_eq!(buf[len], 0, "message not NUL-terminated");
        assert!(
            std::str::from_utf8(&buf[..len]).is_ok(),
            "message not UTF-8"
        );
    }
    let written = if cap == 0 { 0 } else { len + 1 };
    assert!(
        buf[written..].iter().all(|&b| b == fill),
        "bytes written past the message"
    );
}

/// Config parsing through `plb_balancer_new`: the status agrees with the Rust parser, the error
/// buffer is used within its capacity, and an accepted config yields a working balancer.
pub fn config(data: &[u8]) {
    const FILL: u8 = 0xA5;
    let cap = data.len() % 97;
    let mut err = [FILL; 128];
    let mut err_len = usize::MAX;
    let mut out: *mut plb_balancer = null_mut();
    let status = unsafe {
        plb_balancer_new(
            data.as_ptr(),
            data.len(),
            &mut out,
            err.as_mut_ptr() as *mut _,
            cap,
            &mut err_len,
        )
    };
    check_message(&err, cap, err_len, FILL);
    let expected = match std::str::from_utf8(data) {
        Err(_) => Err(PLB_ERR_INVALID_UTF8),
        Ok(text) => match polylb::Config::parse(text) {
            Ok(c) => {
                assert_values_in_range(text);
                // Keys are independent and each appears once: their order cannot matter.
                let reversed: Vec<&str> = text.split('&').rev().collect();
                assert_eq!(
                    polylb::Config::parse(&reversed.join("&")).as_ref(),
                    Ok(&c),
                    "pair order changed the config"
                );
                Ok(c)
            }
            Err(e) => {
                assert_eq!(e.status.code(), PLB_ERR_INVALID_CONFIG, "{}", e.message);
                assert!(!e.message.is_empty());
                Err(PLB_ERR_INVALID_CONFIG)
            }
        },
    };
    match expected {
        Err(code) => {
            assert_eq!(status, code);
            assert!(out.is_null(), "out written on failure");
            if cap > 1 {
                assert!(err_len > 0, "a failure must say why");
            }
        }
        Ok(c) => {
            assert_eq!(status, PLB_OK);
            assert!(!out.is_null());
            assert_eq!(err_len, 0);
            exercise(out, c.strategy.name());
            same_as_with_config(data, &c);
            unsafe { plb_balancer_free(out) };
        }
    }
}

/// A short smoke run on a freshly created balancer: three invokers, every hot call once.
fn exercise(b: *mut plb_balancer, strategy: &str) {
    let addrs = ["10.0.0.1:20880", "10.0.0.2:20880", "10.0.0.3:20880"];
    let set: Vec<plb_invoker> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| invoker(i as u64 + 1, a.as_bytes(), 100 * (i as i32 + 1)))
        .collect();
    unsafe {
        let s = plb_balancer_update(b, set.as_ptr(), set.len(), null_mut(), 0, null_mut());
        assert_eq!(s, PLB_OK);
        let mut m = u32::MAX;
        assert_eq!(plb_balancer_method(b, b"m".as_ptr(), 1, &mut m), PLB_OK);
        let now = 1_700_000_000_000_000;
        for k in 0u8..4 {
            let id = plb_select(b, m, [k].as_ptr(), 1, now);
            assert!((1..=3).contains(&id), "select gave {id}");
            assert_eq!(plb_report(b, m, id as u64, 1000, 0, now), PLB_OK);
        }
        let json = stats(b, now, 64);
        assert!(json.starts_with(&format!("{{\"strategy\":\"{strategy}\"")));
        assert_all_idle(&json);
    }
}

/// The parsed `Config` is one `Balancer::with_config` accepts (it validates what `parse` did),
/// and a balancer made from it behaves as the one made from the string: with a seed every
/// pick is reproducible, so both give the same picks and the same stats.
fn same_as_with_config(text: &[u8], c: &polylb::Config) {
    let mut b: *mut plb_balancer = null_mut();
    let s =
        unsafe { plb_balancer_new(text.as_ptr(), text.len(), &mut b, null_mut(), 0, null_mut()) };
    assert_eq!(s, PLB_OK);
    let twin = match polylb::Balancer::with_config(c.clone()) {
        Ok(twin) => twin,
        Err(e) => panic!("with_config refused a parsed config: {}: {c:?}", e.message),
    };
    let set: Vec<polylb::Invoker> = (1..=5u64)
        .map(|id| {
            polylb::Invoker::new(100 + id, format!("10.3.0.{id}:20880"))
                .weight(40 * id as i32)
                .zone(if id % 2 == 0 { "zone-a" } else { "zone-b" })
        })
        .collect();
    twin.update(&set).unwrap();
    let raw: Vec<plb_invoker> = set
        .iter()
        .map(|i| plb_invoker {
            zone: i.zone.as_ref().unwrap().as_ptr(),
            zone_len: i.zone.as_ref().unwrap().len(),
            ..invoker(i.id, i.address.as_bytes(), i.weight)
        })
        .collect();
    let now = 1_700_000_000_000_000;
    unsafe {
        let s = plb_balancer_update(b, raw.as_ptr(), raw.len(), null_mut(), 0, null_mut());
        assert_eq!(s, PLB_OK);
        let m = twin.method("twin").unwrap();
        let mut abi_m = u32::MAX;
        assert_eq!(
            plb_balancer_method(b, b"twin".as_ptr(), 4, &mut abi_m),
            PLB_OK
        );
        assert_eq!(abi_m, m);
        let mut held = Vec::new();
        for k in 0u64..24 {
            let t = now + k as i64 * 1000;
            let key = k.to_le_bytes();
            let abi = plb_select(b, m, key.as_ptr(), key.len(), t);
            let rust = twin.select(m, &key, t).map(|id| id as i64);
            assert!(abi >= 0, "select failed: {abi}");
            if c.seed.is_some() {
                assert_eq!(
                    Ok(abi),
                    rust,
                    "pick {k}: the string's balancer and with_config's differ"
                );
            }
            held.push((abi as u64, rust.unwrap() as u64));
            if k % 3 != 0 {
                let (x, y) = held.remove(0);
                let outcome = (k % 4) as i32;
                assert_eq!(plb_report(b, m, x, 1000 * k as i64, outcome, t), PLB_OK);
                twin.report(
                    m,
                    y,
                    1000 * k as i64,
                    polylb::Outcome::from_code(outcome).unwrap(),
                    t,
                )
                .unwrap();
            }
        }
        if c.seed.is_some() {
            let t = now + 30_000;
            assert_eq!(stats(b, t, 0), twin.stats_json(t), "stats differ");
        }
        plb_balancer_free(b);
    }
}

fn invoker(id: u64, address: &[u8], weight: i32) -> plb_invoker {
    plb_invoker {
        id,
        address: address.as_ptr(),
        address_len: address.len(),
        weight,
        start_time_ms: 0,
        warmup_ms: -1,
        zone: null(),
        zone_len: 0,
    }
}

/// Reads the stats JSON through a buffer of `first_cap` bytes, then through one just big enough
/// if that was too small; checks the length protocol both times.
unsafe fn stats(b: *const plb_balancer, now: i64, first_cap: usize) -> String {
    const FILL: u8 = 0x5A;
    let mut buf = vec![FILL; first_cap];
    let mut len = usize::MAX;
    let ptr = if first_cap == 0 {
        null_mut()
    } else {
        buf.as_mut_ptr() as *mut _
    };
    let s = plb_balancer_stats(b, now, ptr, first_cap, &mut len);
    if s == PLB_ERR_BUFFER_TOO_SMALL {
        assert!(
            len >= first_cap,
            "needed {len} but cap {first_cap} was too small"
        );
        // A too-small buffer gets an empty string (when it has room for the NUL), nothing more.
        if first_cap > 0 {
            assert_eq!(buf[0], 0, "a too-small buffer must hold an empty string");
        }
        assert!(
            buf.iter().skip(1).all(|&b| b == FILL),
            "written past the NUL although too small"
        );
        let mut needed = len;
        loop {
            buf = vec![FILL; needed + 1];
            let s = plb_balancer_stats(b, now, buf.as_mut_ptr() as *mut _, needed + 1, &mut len);
            if s == PLB_ERR_BUFFER_TOO_SMALL && now == 0 {
                // The library's clock moved on between the calls, and the document with it (the
                // age of a call in flight in peakewma's latency_now_us, a warm-up weight): read
                // again, as the bindings do.
                assert!(len > needed, "too small for {len} bytes after {needed}");
                needed = len;
                continue;
            }
            assert_eq!(s, PLB_OK);
            if now != 0 {
                assert_eq!(len, needed, "the stats changed size between two calls");
            }
            break;
        }
    } else {
        assert_eq!(s, PLB_OK);
    }
    assert_eq!(buf[len], 0, "stats not NUL-terminated");
    let json = std::str::from_utf8(&buf[..len])
        .expect("stats are UTF-8")
        .to_owned();
    assert!(
        json.starts_with("{\"strategy\":") && json.ends_with("]}"),
        "{json}"
    );
    json
}

/// Every `"active":N` in the stats (per invoker and per method) is 0.
pub fn assert_all_idle(json: &str) {
    for (i, _) in json.match_indices("\"active\":") {
        let rest = &json[i + "\"active\":".len()..];
        assert!(
            rest.starts_with('0') && !rest[1..].starts_with(|c: char| c.is_ascii_digit()),
            "a call is still in flight after every select was reported: {}",
            &json[i..(i + 24).min(json.len())]
        );
    }
}

/// Each invoker of `set` is in the stats, in set order, with exactly the calls in flight that
/// the selects and reports so far leave (`active` per method and id).
fn assert_active(json: &str, set: &[u64], active: &HashMap<(u32, u64), u64>) {
    let mut from = 0;
    for id in set {
        let row = format!("{{\"id\":{id},");
        let at = from
            + json[from..]
                .find(&row)
                .unwrap_or_else(|| panic!("{id} not in stats (in set order): {json}"));
        // The invoker's own fields come before its per-method rows: the first "active" is its.
        let a = at + json[at..].find("\"active\":").expect("active") + "\"active\":".len();
        let digits: String = json[a..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let expected: u64 = active
            .iter()
            .filter(|((_, x), _)| x == id)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(
            digits.parse::<u64>().ok(),
            Some(expected),
            "in flight on {id}: the stats say {digits}, selects less reports leave {expected}"
        );
        from = a;
    }
}

/// One invoker of an update, with the storage its pointers borrow.
struct Spec {
    id: u64,
    address: Vec<u8>,
    null_address: bool,
    /// Passed with a length no array can have (the pointer is valid, the length is not).
    huge_address: bool,
    weight: i32,
    start_time_ms: i64,
    warmup_ms: i32,
    zone: Option<Vec<u8>>,
    huge_zone: bool,
}

/// Array lengths no caller's array can have: `(size_t)-1` and the first past PTRDIFF_MAX.
const HUGE: [usize; 2] = [usize::MAX, isize::MAX as usize + 1];

fn pick<T: Copy>(r: &mut Reader, table: &[T], otherwise: impl FnOnce(u8) -> T) -> T {
    let b = r.u8();
    table
        .get(b as usize)
        .copied()
        .unwrap_or_else(|| otherwise(b))
}

fn read_spec(r: &mut Reader, now_ms: i64) -> Spec {
    let id_sel = r.u8();
    let id = match id_sel {
        250..=255 => i64::MAX as u64 + 1 + (id_sel - 250) as u64 * 0x1000_0000_0000_0000,
        249 => i64::MAX as u64,
        x => (x % 24) as u64,
    };
    let addr_sel = r.u8();
    let (address, null_address) = match addr_sel {
        255 => (vec![0xC3, 0x28], false), // invalid UTF-8
        254 => (Vec::new(), false),
        253 => (vec![b'x'; 8], true), // NULL with a non-zero length
        x => (format!("10.0.{}.{id}:20880", x % 3).into_bytes(), false),
    };
    let huge_address = addr_sel == 252;
    let weight = pick(r, &[100, 0, i32::MAX, -1, i32::MIN, 1], |b| b as i32 * 7);
    let start_time_ms = pick(
        r,
        &[0, now_ms - 1000, now_ms + 5000, i64::MAX, i64::MIN, -5, 1],
        |_| 0,
    );
    let warmup_ms = pick(r, &[-1, 0, i32::MAX, i32::MIN, 10_000], |b| b as i32 * 997);
    let zone_sel = r.u8();
    let zone = match zone_sel {
        0 | 2 => Some(b"zone-a".to_vec()),
        1 => Some(vec![0xFF]),
        _ => None,
    };
    Spec {
        id,
        address,
        null_address,
        huge_address,
        weight,
        start_time_ms,
        warmup_ms,
        zone,
        huge_zone: zone_sel == 2,
    }
}

/// The status `plb_balancer_update` must return for `specs` (checks in the documented order:
/// text fields invoker by invoker, then ids, weights and duplicates invoker by invoker).
fn expected_update(specs: &[Spec], strategy: &str, config: &str) -> i32 {
    let hashing = matches!(
        strategy,
        "consistenthash" | "boundedhash" | "maglev" | "rendezvous"
    );
    for s in specs {
        if s.null_address {
            return PLB_ERR_NULL_POINTER;
        }
        if s.huge_address {
            return PLB_ERR_INVALID_ARGUMENT;
        }
        if std::str::from_utf8(&s.address).is_err() {
            return PLB_ERR_INVALID_UTF8;
        }
        if s.huge_zone {
            return PLB_ERR_INVALID_ARGUMENT;
        }
        if let Some(z) = &s.zone {
            if std::str::from_utf8(z).is_err() {
                return PLB_ERR_INVALID_UTF8;
            }
        }
    }
    // maglev's table must have a slot for each invoker (checked before the invokers).
    let table = polylb::Config::parse(config).map_or(0, |c| c.maglev_table_size);
    if strategy == "maglev" && specs.len() > table as usize {
        return PLB_ERR_LIMIT_EXCEEDED;
    }
    let mut seen = std::collections::HashSet::new();
    for s in specs {
        if s.id > i64::MAX as u64 {
            return PLB_ERR_ID_OUT_OF_RANGE;
        }
        if s.weight < 0 {
            return PLB_ERR_NEGATIVE_WEIGHT;
        }
        if hashing && s.address.is_empty() {
            return PLB_ERR_INVALID_ARGUMENT;
        }
        if !seen.insert(s.id) {
            return PLB_ERR_DUPLICATE_ID;
        }
    }
    PLB_OK
}

/// Options the input turns on, each valid for `strategy`: zone preference and outlier ejection
/// for every strategy, choices and the preference order for p2c and peakewma (0 = a full
/// scan), slow start where it applies; and apart, pairs of any key with any value
/// (`read_any_keys`), which may or may not leave the config valid.
fn read_options(r: &mut Reader, strategy: &str) -> (String, String) {
    let bits = r.u8();
    let mut options = String::new();
    if bits & 1 != 0 {
        options += "&zone=zone-a";
    }
    if bits & 2 != 0 {
        options += &format!("&outlier.consecutiveFailures={}", 1 + r.u8() % 4);
    }
    if bits & 4 != 0 {
        options += "&outlier.failureRate=50&outlier.minRequests=4&outlier.windowMs=1000";
    }
    if bits & 8 != 0 {
        let choices = [0, 2, 3, 16][r.u8() as usize % 4];
        match strategy {
            "p2c" => options += &format!("&p2c.choices={choices}"),
            "peakewma" => {
                let preference = [0, 1, 1000][r.u8() as usize % 3];
                options +=
                    &format!("&peakewma.choices={choices}&peakewma.preferenceMs={preference}");
            }
            "orca" => {
                // Weights that count at once or after a while, recomputed at nearly every pick
                // or once a second.
                let blackout = [0, 1000, 10_000][r.u8() as usize % 3];
                let update = [1, 1000][r.u8() as usize % 2];
                options += &format!("&orca.blackoutMs={blackout}&orca.updateMs={update}");
            }
            _ => {}
        }
    }
    if bits & 16 != 0 && matches!(strategy, "p2c" | "peakewma" | "boundedhash") {
        options += "&slowstart.windowMs=2000";
    }
    let any_keys = if bits & 32 != 0 {
        read_any_keys(r)
    } else {
        String::new()
    };
    (options, any_keys)
}

/// `plb_balancer_new` on `config`: the balancer, or None after checking that the refusal is a
/// clean one (the documented status, a message, nothing written to `out`) and the one the Rust
/// parser gives. An accepted config has every value within its documented range.
fn new_balancer(config: &str) -> Option<*mut plb_balancer> {
    let mut b: *mut plb_balancer = null_mut();
    let mut err = [0u8; 512];
    let mut len = usize::MAX;
    let s = unsafe {
        plb_balancer_new(
            config.as_ptr(),
            config.len(),
            &mut b,
            err.as_mut_ptr() as *mut _,
            err.len(),
            &mut len,
        )
    };
    check_message(&err, err.len(), len, 0);
    let parsed = polylb::Config::parse(config);
    if s == PLB_OK {
        assert!(!b.is_null() && parsed.is_ok(), "{config}");
        assert_values_in_range(config);
        return Some(b);
    }
    assert_eq!(s, PLB_ERR_INVALID_CONFIG, "{config}");
    assert!(b.is_null(), "out written on failure");
    let message = std::str::from_utf8(&err[..len]).unwrap();
    let e = parsed.expect_err(config);
    assert!(
        len > 0 && e.message.starts_with(message),
        "{message} / {}",
        e.message
    );
    None
}

/// Values at and past the edges of every key's range (and a few that parse as nothing).
const EDGE_VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "4",
    "5",
    "16",
    "17",
    "99",
    "100",
    "101",
    "0.1",
    "0.09",
    "0.99",
    "1.0",
    "1.5",
    "10",
    "10.01",
    "100.5",
    "NaN",
    "inf",
    "-0",
    "1e308",
    "65536",
    "65537",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "zone-a",
    "zone-b",
    "p2c",
    " 7 ",
    "",
    "x",
    // Past maglev.tableSize's largest prime, 16777213 (not a value here: a table that size
    // takes a second to build, too slow for fuzzing).
    "16777214",
];

/// How many strategies and config keys there were when the corpus was first gathered (the
/// strategies added since, `maglev`, `rendezvous` and `orca`, take turns over the top bytes:
/// 236 is `maglev`, 237 `rendezvous`, 238 `orca`, and so on).
const STRATEGIES_BEFORE_MAGLEV: usize = 9;
const KEYS_BEFORE_MAGLEV: usize = 24;

/// Op 6 is a load report (`plb_report_load`) when its id byte is at least this (ids 0..26 as
/// for provider metrics, which the bytes below keep); added after the corpus was gathered.
const LOAD_REPORT: u8 = 208;

/// Bytes from here up reach what was added to a decoding after the corpus was gathered.
const FIRST_NEW: u8 = 236;

/// Op 9 is a reconnect (`plb_report_reconnect`) when its next byte is at least this (the bytes
/// below keep the status code lookup, `plb_status_str`, the corpus was gathered with).
const RECONNECT: u8 = 0xF0;

/// A byte's index into a list that has grown from `old` entries to `len` (new ones appended):
/// bytes below the last 8 % of the range keep the index `byte % old` they had before, so the
/// corpus' inputs mostly decode as they did; the top bytes reach the new entries.
fn stable_index(byte: u8, old: usize, len: usize) -> usize {
    let added = len - old;
    if added == 0 {
        return byte as usize % len;
    }
    if byte >= FIRST_NEW {
        old + (byte - FIRST_NEW) as usize % added
    } else {
        byte as usize % old
    }
}

/// Up to 6 `&key=value` pairs of any key the parser knows (`Config::keys`, so keys added later
/// are reached too) with a value in, at the edge of, or outside its range: a config that comes
/// out invalid must be a clean error (`abi_sequence` then runs without these pairs).
fn read_any_keys(r: &mut Reader) -> String {
    let keys: Vec<&str> = polylb::Config::keys().map(|(k, _)| k).collect();
    let n = 1 + r.u8() % 6;
    let mut pairs = String::new();
    for _ in 0..n {
        let key = keys[stable_index(r.u8(), KEYS_BEFORE_MAGLEV, keys.len())];
        let v = r.u8();
        let value = match EDGE_VALUES.get(v as usize) {
            Some(text) => text.to_string(),
            // Any other byte: a value of the key's scale, seconds to days for times.
            None => (v as i64 * 997 * 10i64.pow(r.u8() as u32 % 7)).to_string(),
        };
        pairs += &format!("&{key}={value}");
    }
    pairs
}

/// Whether `value` is within the range `src/config/keys.rs` documents for `key` (independent of the
/// parser, from the key descriptions), for keys that have a range; None for unknown keys.
fn in_documented_range(key: &str, value: &str) -> Option<bool> {
    let value = value.trim();
    if value.is_empty() {
        // Absent: the default applies.
        return Some(true);
    }
    let int = |lo: i128, hi: i128| value.parse::<i128>().is_ok_and(|v| (lo..=hi).contains(&v));
    let float = |lo: f64, hi: f64| value.parse::<f64>().is_ok_and(|v| (lo..=hi).contains(&v));
    let (i32_max, i64_max) = (i32::MAX as i128, i64::MAX as i128);
    Some(match key {
        "loadbalance" => polylb::StrategyKind::from_name(value).is_some(),
        "hash.nodes" => int(4, 65536),
        "warmup" => int(i32::MIN as i128, i32_max),
        "seed" => int(0, u64::MAX as i128),
        "timeout" => int(1, i32_max),
        "p2c.choices" | "peakewma.choices" => int(0, 0) || int(2, 16),
        // Any i64, as Dubbo's `now - lastUpdate > slidePeriod` takes any int.
        "shortestresponse.slidePeriod" => int(i64::MIN as i128, i64_max),
        "peakewma.decay"
        | "outlier.windowMs"
        | "outlier.baseEjectionMs"
        | "outlier.maxEjectionMs" => int(1, i64_max),
        "peakewma.failurePenalty" | "peakewma.preferenceMs" | "slowstart.windowMs" => {
            int(0, i64_max)
        }
        "boundedhash.factor" => float(1.0, 100.0),
        "maglev.tableSize" => {
            int(7, 16_777_213) && {
                let n: u64 = value.parse().expect("an int");
                (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
            }
        }
        "zone" | "subset.key" => true,
        "zone.minHealthyPercent" | "slowstart.minWeightPercent" | "subset.minHealthyPercent" => {
            int(1, 100)
        }
        "subset.size" | "subset.index" => int(0, u32::MAX as i128),
        "outlier.failureRate" | "outlier.maxEjectionPercent" => int(0, 100),
        "outlier.consecutiveFailures" => int(0, u32::MAX as i128),
        "outlier.minRequests" => int(1, u32::MAX as i128),
        "slowstart.aggression" => float(0.1, 10.0),
        "orca.blackoutMs" => int(0, i64_max),
        "orca.expirationMs" | "orca.updateMs" => int(1, i64_max),
        "orca.errorPenalty" => float(0.0, 100.0),
        _ => return None,
    })
}

/// An accepted config has every value within its documented range (so every value outside
/// its range was refused), and every key it was given is one the parser documents.
fn assert_values_in_range(text: &str) {
    for pair in text.split('&').filter(|p| !p.trim().is_empty()) {
        let (key, value) = pair.split_once('=').expect("accepted pairs have '='");
        match in_documented_range(key.trim(), value) {
            Some(ok) => assert!(ok, "{key}={value} is outside its range but was accepted"),
            None => panic!("accepted key {key} has no documented range here: add it"),
        }
    }
}

/// A valid set wider than a full scan's stack field (65 to 128 invokers, ids 0..n), or, for the
/// top bytes, past the 256 from which `random`, `leastactive` and `p2c` draw the next pick ahead
/// (250 to 290), with weights, zones and warm-up drawn from one byte each.
fn wide_set(r: &mut Reader) -> Vec<Spec> {
    let size = r.u8();
    let n = if size >= FIRST_NEW {
        250 + (size - FIRST_NEW) as u64 * 2
    } else {
        65 + (size % 64) as u64
    };
    let (weights, zones, warmup) = (r.u8(), r.u8(), r.u8());
    (0..n)
        .map(|id| Spec {
            id,
            address: format!("10.1.{}.{}:20880", id / 250, id % 250).into_bytes(),
            null_address: false,
            huge_address: false,
            weight: (weights as u64 * (id + 1) % 11) as i32,
            start_time_ms: 0,
            warmup_ms: if warmup & 1 != 0 { 10_000 } else { -1 },
            zone: (zones as u64 & (1 << (id % 8)) != 0).then(|| b"zone-a".to_vec()),
            huge_zone: false,
        })
        .collect()
}

/// How an id array is passed: as it is, as NULL with its length, or with a length no array can
/// have.
#[derive(Clone, Copy)]
enum Arg {
    Valid,
    Null,
    Huge,
}

impl Arg {
    fn ptr(self, ids: &[u64]) -> *const u64 {
        match self {
            Arg::Null => null(),
            _ => ids.as_ptr(),
        }
    }
    fn len(self, ids: &[u64]) -> usize {
        match self {
            Arg::Huge => [usize::MAX, isize::MAX as usize / 8 + 1][ids.len() % 2],
            _ => ids.len(),
        }
    }
    fn error(self) -> Option<i32> {
        match self {
            Arg::Valid => None,
            Arg::Null => Some(PLB_ERR_NULL_POINTER),
            Arg::Huge => Some(PLB_ERR_INVALID_ARGUMENT),
        }
    }
}

fn read_ids(r: &mut Reader) -> (Vec<u64>, Arg) {
    let sel = r.u8();
    let ids: Vec<u64> = (0..sel % 6).map(|_| (r.u8() % 26) as u64).collect();
    // 0xFF and 0xFE have 3 and 2 ids: never empty, so NULL and the length both matter.
    let arg = match sel {
        0xFF => Arg::Null,
        0xFE => Arg::Huge,
        _ => Arg::Valid,
    };
    (ids, arg)
}

/// The balancer an `abi_sequence` input runs on: its strategy, its config and the balancer.
fn read_balancer(r: &mut Reader) -> (&'static str, String, *mut plb_balancer) {
    let strategy = {
        let all = strategies();
        all[stable_index(r.u8(), STRATEGIES_BEFORE_MAGLEV, all.len())]
    };
    let base = format!(
        "loadbalance={strategy}&seed={}&hash.nodes={}&timeout={}",
        r.u8(),
        4 + r.u8() % 40,
        1 + r.u8() as u32 * 100,
    );
    let (options, any_keys) = read_options(r, strategy);
    let valid = format!("{base}{options}");
    // A key the pairs give replaces the base's (the strategy stays: the checks use it), so that
    // hash.nodes, seed and timeout reach their edges too.
    let given: Vec<String> = any_keys
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, _)| format!("{k}="))
        .filter(|k| k != "loadbalance=")
        .collect();
    let kept: Vec<&str> = valid
        .split('&')
        .filter(|p| !given.iter().any(|k| p.starts_with(k.as_str())))
        .collect();
    let config = format!("{}{any_keys}", kept.join("&"));
    match new_balancer(&config) {
        Some(b) => (strategy, config, b),
        // Only the pairs of any key can make the config invalid.
        None if !any_keys.is_empty() => {
            (strategy, valid.clone(), new_balancer(&valid).expect(&valid))
        }
        None => panic!("{valid} refused"),
    }
}

/// The config an `abi_sequence` input runs with (for the corpus' coverage of the keys).
pub fn abi_sequence_config(data: &[u8]) -> String {
    let (_, config, b) = read_balancer(&mut Reader::new(data));
    unsafe { plb_balancer_free(b) };
    config
}

/// One balancer driven by an input's bytes, with the model the checks compare it with.
struct Machine {
    strategy: &'static str,
    config: String,
    b: *mut plb_balancer,
    names: HashMap<Vec<u8>, u32>,
    methods: Vec<u32>,
    set: Vec<u64>,
    outstanding: Vec<(u32, u64)>,
    /// Calls in flight per (method, id) of the current set: selects not yet reported.
    active: HashMap<(u32, u64), u64>,
    now: i64,
}

impl Machine {
    fn new(r: &mut Reader) -> Self {
        let (strategy, config, b) = read_balancer(r);
        Machine {
            strategy,
            config,
            b,
            names: HashMap::from([(Vec::new(), 0)]),
            methods: vec![0],
            set: Vec::new(),
            outstanding: Vec::new(),
            active: HashMap::new(),
            now: 1_700_000_000_000_000,
        }
    }

    /// One ABI call, read from `r`, and its checks.
    fn step(&mut self, r: &mut Reader) {
        let (strategy, b, mut now) = (self.strategy, self.b, self.now);
        let Machine {
            config,
            names,
            methods,
            set,
            outstanding,
            active,
            ..
        } = self;
        let config: &str = config;
        let op = r.u8();
        let method = {
            let sel = r.u8();
            if sel < 240 {
                methods[sel as usize % methods.len()]
            } else if sel == 255 {
                u32::MAX
            } else {
                methods.len() as u32 + (sel - 240) as u32
            }
        };
        let known_method = (method as usize) < methods.len();
        match op % 10 {
            0 => {
                // update
                let n = r.u8() % 18;
                let specs: Vec<Spec> = if n == 17 {
                    wide_set(r)
                } else {
                    (0..n).map(|_| read_spec(r, now / 1000)).collect()
                };
                let raw: Vec<plb_invoker> = specs
                    .iter()
                    .map(|s| plb_invoker {
                        id: s.id,
                        address: if s.null_address {
                            null()
                        } else {
                            s.address.as_ptr()
                        },
                        address_len: if s.huge_address {
                            HUGE[s.id as usize % 2]
                        } else {
                            s.address.len()
                        },
                        weight: s.weight,
                        start_time_ms: s.start_time_ms,
                        warmup_ms: s.warmup_ms,
                        zone: s.zone.as_ref().map_or(null(), |z| z.as_ptr()),
                        zone_len: match &s.zone {
                            Some(_) if s.huge_zone => HUGE[s.id as usize % 2],
                            Some(z) => z.len(),
                            None => 0,
                        },
                    })
                    .collect();
                let array_sel = if n > 0 { r.u8() } else { 0 };
                let null_array = array_sel == 0xFF;
                // A valid pointer with a length no array can have (a caller passing -1).
                let huge_n = (array_sel == 0xFE).then(|| {
                    [
                        usize::MAX,
                        isize::MAX as usize / size_of::<plb_invoker>() + 1,
                    ][n as usize % 2]
                });
                // At a time of the caller's: the library's clock would move the document.
                let stats_now = if now == 0 { 1_700_000_000_000_000 } else { now };
                let before = unsafe { stats(b, stats_now, 0) };
                let cap = r.u8() as usize % 48;
                let mut err = [0xEEu8; 64];
                let mut err_len = usize::MAX;
                let status = unsafe {
                    plb_balancer_update(
                        b,
                        if null_array { null() } else { raw.as_ptr() },
                        huge_n.unwrap_or(raw.len()),
                        err.as_mut_ptr() as *mut _,
                        cap,
                        &mut err_len,
                    )
                };
                check_message(&err, cap, err_len, 0xEE);
                let expected = if null_array {
                    PLB_ERR_NULL_POINTER
                } else if huge_n.is_some() {
                    PLB_ERR_INVALID_ARGUMENT
                } else {
                    expected_update(&specs, strategy, config)
                };
                assert_eq!(status, expected, "update status");
                if status == PLB_OK {
                    assert_eq!(err_len, 0);
                    *set = specs.iter().map(|s| s.id).collect();
                    // State of ids that stay is kept; an id that left starts again from 0.
                    active.retain(|(_, id), _| set.contains(id));
                } else {
                    if cap > 1 {
                        assert!(err_len > 0, "a rejected update must say why");
                    }
                    // A rejected update changes nothing: the set, counters and weights read
                    // back byte for byte as before.
                    let after = unsafe { stats(b, stats_now, 0) };
                    assert_eq!(
                        after, before,
                        "a rejected update ({status}) changed the stats"
                    );
                }
            }
            1 => {
                // method
                let name: Vec<u8> = match r.u8() % 8 {
                    0 => Vec::new(),
                    1 => vec![0xF0, 0x28, 0x8C, 0x28],
                    k => format!("m{}", k as u32 * 3 + r.u8() as u32 % 5).into_bytes(),
                };
                let name_sel = if name.is_empty() { 0 } else { r.u8() };
                let null_name = name_sel == 0xFF;
                let huge_name = name_sel == 0xFE;
                let mut out = u32::MAX;
                let status = unsafe {
                    plb_balancer_method(
                        b,
                        if null_name { null() } else { name.as_ptr() },
                        if huge_name {
                            HUGE[name.len() % 2]
                        } else {
                            name.len()
                        },
                        &mut out,
                    )
                };
                if null_name {
                    assert_eq!(status, PLB_ERR_NULL_POINTER);
                } else if huge_name {
                    assert_eq!(status, PLB_ERR_INVALID_ARGUMENT);
                    assert_eq!(out, u32::MAX, "out written on failure");
                } else if std::str::from_utf8(&name).is_err() {
                    assert_eq!(status, PLB_ERR_INVALID_UTF8);
                } else {
                    assert_eq!(status, PLB_OK);
                    let id = *names.entry(name).or_insert(methods.len() as u32);
                    assert_eq!(out, id, "a name's id is stable and ids are dense");
                    if id as usize == methods.len() {
                        methods.push(id);
                    }
                }
            }
            2 | 3 => {
                // select (plb_select, or plb_select32 at the library's clock) / select_among
                let key_sel = r.u8();
                // Up to 23 bytes, or for the top bytes 40 to 130: MD5 takes a second block
                // from 56 bytes and a third from 120.
                let key_len = match key_sel {
                    FIRST_NEW..=0xFE => 40 + (key_sel - FIRST_NEW) as usize * 5,
                    _ => key_sel as usize % 24,
                };
                let key = r.take(key_len).to_vec();
                let among = op % 10 == 3;
                let narrow = among || (op / 10) % 2 == 0;
                // A valid key pointer with a length no array can have.
                let huge_key = narrow && key_sel == 0xFF;
                let key_len = if huge_key {
                    HUGE[key.len() % 2]
                } else {
                    key.len()
                };
                let (cands, cands_arg) = if among {
                    read_ids(r)
                } else {
                    (Vec::new(), Arg::Valid)
                };
                let (excl, excl_arg) = if among {
                    read_ids(r)
                } else {
                    (Vec::new(), Arg::Valid)
                };
                let got = unsafe {
                    if among {
                        plb_select_among(
                            b,
                            method,
                            key.as_ptr(),
                            key_len,
                            cands_arg.ptr(&cands),
                            cands_arg.len(&cands),
                            excl_arg.ptr(&excl),
                            excl_arg.len(&excl),
                            now,
                        )
                    } else if narrow {
                        plb_select(b, method, key.as_ptr(), key_len, now)
                    } else {
                        plb_select32(b, method, key.as_ptr(), key.len() as u32)
                    }
                };
                let allowed: Vec<u64> = set
                    .iter()
                    .copied()
                    .filter(|id| cands.is_empty() || cands.contains(id))
                    .filter(|id| !excl.contains(id))
                    .collect();
                // Arguments are checked in order (key, candidates, exclusions), then the call.
                let expected_err = if huge_key {
                    Some(PLB_ERR_INVALID_ARGUMENT)
                } else if let Some(code) = cands_arg.error().or(excl_arg.error()) {
                    Some(code)
                } else if !known_method {
                    Some(PLB_ERR_UNKNOWN_METHOD)
                } else if set.is_empty() {
                    Some(PLB_ERR_NO_PROVIDER)
                } else if cands.iter().any(|c| !set.contains(c)) {
                    Some(PLB_ERR_UNKNOWN_CANDIDATE)
                } else if allowed.is_empty() {
                    Some(PLB_ERR_NO_CANDIDATE)
                } else {
                    None
                };
                match expected_err {
                    Some(code) => assert_eq!(got, -(code as i64), "select status"),
                    None => {
                        assert!(
                            got >= 0 && allowed.contains(&(got as u64)),
                            "select gave {got}, allowed {allowed:?}"
                        );
                        outstanding.push((method, got as u64));
                        *active.entry((method, got as u64)).or_default() += 1;
                    }
                }
            }
            4 | 5 => {
                // report
                let sel = r.u8() as usize;
                let (method, id, from_outstanding) = if !outstanding.is_empty() && sel < 200 {
                    let (m, id) = outstanding[sel % outstanding.len()];
                    (m, id, true)
                } else {
                    (method, (sel % 26) as u64, false)
                };
                let known_method = (method as usize) < methods.len();
                let elapsed = pick(r, &[0, i64::MAX, -1, i64::MIN, 1], |b| b as i64 * 997);
                let outcome = pick(r, &[0, 1, 2, 3, 0, 1, 2, 3, 4, -1, i32::MAX], |b| {
                    (b % 4) as i32
                });
                // plb_report32 (at the library's clock) where its u32 elapsed time can carry it.
                let status = if op % 10 == 5 && (0..=u32::MAX as i64).contains(&elapsed) {
                    unsafe {
                        plb_report32(
                            b,
                            method,
                            (id >> 32) as u32,
                            id as u32,
                            elapsed as u32,
                            outcome,
                        )
                    }
                } else {
                    unsafe { plb_report(b, method, id, elapsed, outcome, now) }
                };
                let expected = if !(0..=3).contains(&outcome) {
                    PLB_ERR_UNKNOWN_OUTCOME
                } else if !known_method {
                    PLB_ERR_UNKNOWN_METHOD
                } else if elapsed < 0 {
                    PLB_ERR_INVALID_ARGUMENT
                } else {
                    PLB_OK
                };
                assert_eq!(status, expected, "report status");
                if status == PLB_OK && set.contains(&id) {
                    // Any report ends one call of (method, id), if one is in flight.
                    if let Some(a) = active.get_mut(&(method, id)) {
                        *a = a.saturating_sub(1);
                    }
                }
                if status == PLB_OK && from_outstanding {
                    let i = outstanding
                        .iter()
                        .position(|&x| x == (method, id))
                        .expect("present");
                    outstanding.swap_remove(i);
                }
            }
            6 if r.peek() >= LOAD_REPORT => {
                // a load report (orca uses them, others ignore them; per invoker, no method)
                let id = (r.u8() % 26) as u64;
                let mut number = || match r.u8() {
                    0 => f64::NAN,
                    1 => -1.0,
                    2 => f64::INFINITY,
                    3 => f64::from_bits(r.u64()),
                    4 => 0.0,
                    x => x as f64 / 10.0,
                };
                let (qps, eps, utilization) = (number(), number(), number());
                let status = unsafe { plb_report_load(b, id, qps, eps, utilization, now) };
                let valid = |x: f64| x.is_finite() && x >= 0.0;
                let expected = if valid(qps) && valid(eps) && valid(utilization) && eps <= qps {
                    PLB_OK
                } else {
                    PLB_ERR_INVALID_ARGUMENT
                };
                assert_eq!(status, expected, "load report status");
            }
            6 => {
                // provider metrics (adaptive uses them, others ignore them)
                let id = (r.u8() % 26) as u64;
                let provider_time =
                    pick(r, &[0, -1, i64::MAX, i64::MIN], |b| now / 1000 + b as i64);
                let cpu = match r.u8() {
                    0 => f64::NAN,
                    1 => -1.0,
                    2 => f64::INFINITY,
                    3 => f64::MAX,
                    4 => f64::from_bits(r.u64()),
                    x => x as f64 / 50.0,
                };
                let rt = pick(r, &[0, -1, i64::MAX], |b| b as i64 * 1000);
                let status = unsafe {
                    plb_report_provider_metrics(b, method, id, provider_time, cpu, rt, now)
                };
                let expected = if !known_method {
                    PLB_ERR_UNKNOWN_METHOD
                } else if !cpu.is_finite() || cpu < 0.0 || rt < 0 || provider_time < 0 {
                    PLB_ERR_INVALID_ARGUMENT
                } else {
                    PLB_OK
                };
                assert_eq!(status, expected, "provider metrics status");
            }
            7 => {
                // stats, through a buffer of varying size
                let cap = match r.u8() {
                    0 => 0,
                    x => x as usize * 5,
                };
                let json = unsafe { stats(b, now, cap) };
                assert!(json.starts_with(&format!("{{\"strategy\":\"{strategy}\"")));
                assert_active(&json, set, active);
            }
            8 => {
                // time moves: forwards, backwards, to the extremes, or to the library's clock
                now = match r.u8() {
                    0 => 0,
                    1 => i64::MAX,
                    2 => i64::MIN,
                    3 => -1,
                    4 => 1_700_000_000_000_000,
                    x if x < 64 => now.saturating_sub(x as i64 * 1_000_000),
                    x => now.saturating_add(x as i64 * 250_000),
                };
            }
            9 if r.peek() >= RECONNECT => {
                // a reconnect (orca ends the invoker's run of load reports; others ignore it)
                r.u8();
                let id = (r.u8() % 26) as u64;
                let status = unsafe { plb_report_reconnect(b, id, now) };
                assert_eq!(status, PLB_OK, "reconnect status");
                if strategy == "orca" && set.contains(&id) {
                    // Whatever the time, a run just ended does not count.
                    let stats_now = if now == 0 { 1_700_000_000_000_000 } else { now };
                    let json = unsafe { stats(b, stats_now, 0) };
                    let row = format!("{{\"id\":{id},");
                    let at = json.find(&row).expect("a member's row");
                    let counted = at + json[at..].find("\"orca_counted\":").expect("orca_counted");
                    assert!(
                        json[counted..].starts_with("\"orca_counted\":false"),
                        "{id}'s weight counts after a reconnect: {json}"
                    );
                }
            }
            _ => {
                let code = r.u64() as i32;
                let text = unsafe { std::ffi::CStr::from_ptr(plb_status_str(code)) };
                assert!(!text.to_bytes().is_empty());
                assert!(text.to_str().is_ok());
            }
        }
        self.now = now;
    }

    /// Reports every call still in flight, checks that none is left counted, and frees the
    /// balancer.
    fn finish(self) {
        let Machine {
            b, mut outstanding, ..
        } = self;
        // Report every call still in flight; nothing may remain counted.
        let end = 1_700_000_000_000_000;
        for (m, id) in outstanding.drain(..) {
            assert_eq!(
                unsafe { plb_report(b, m, id, 0, PLB_OUTCOME_CANCELLED, end) },
                PLB_OK
            );
        }
        let json = unsafe { stats(b, end, 0) };
        assert_all_idle(&json);
        unsafe { plb_balancer_free(b) };
    }
}

/// A byte-driven sequence of ABI calls on one balancer (at most 300 calls per input).
pub fn abi_sequence(data: &[u8]) {
    let mut r = Reader::new(data);
    let mut machine = Machine::new(&mut r);
    let mut calls = 0;
    while !r.done() && calls < 300 {
        calls += 1;
        machine.step(&mut r);
    }
    machine.finish();
}

/// Two balancers' call sequences interleaved on one thread, with a balancer freed and another
/// created in its place between calls (at most 300 calls per input). A thread keeps caches that
/// every balancer it calls shares (snapshots, filtered views, its counter id, scratch space), so
/// each balancer's checks must hold whatever the other does, and a new balancer (often at the
/// freed one's address) must start from nothing of the old one's.
pub fn abi_pair(data: &[u8]) {
    let mut r = Reader::new(data);
    let mut machines = [Some(Machine::new(&mut r)), Some(Machine::new(&mut r))];
    let mut calls = 0;
    while !r.done() && calls < 300 {
        calls += 1;
        let sel = r.u8();
        let slot = &mut machines[(sel & 1) as usize];
        if sel >= REPLACE {
            // Freed first, so that the allocator may hand its memory to the new one.
            slot.take().expect("always refilled").finish();
            *slot = Some(Machine::new(&mut r));
        } else {
            slot.as_mut().expect("always refilled").step(&mut r);
        }
    }
    for machine in machines.into_iter().flatten() {
        machine.finish();
    }
}

/// `abi_pair`'s selector bytes from this one on replace a balancer; below it, the low bit picks
/// the balancer that makes the next call.
const REPLACE: u8 = 0xF0;
