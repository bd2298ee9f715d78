//! Status codes shared by the Rust API and the C ABI, and the error type of cold calls.

use std::fmt;

/// Outcome of a call, stable across releases: the numeric values are the C ABI's status codes
/// and are never renumbered. Hot calls (`select`, `report`) return a bare `Status` so that an
/// error never allocates; cold calls return [`Error`], which adds a message.
///
/// Codes are appended as the library grows: a `match` needs a `_` arm (`#[non_exhaustive]`).
#[repr(i32)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// Success (`PLB_OK`); the Rust API never returns it as an error.
    Ok = 0,
    /// C ABI only: a required pointer is NULL (the handle, an output, or data with a non-zero
    /// length).
    NullPointer = 1,
    /// C ABI only: a config, address, zone or method name is not valid UTF-8.
    InvalidUtf8 = 2,
    /// The config is wrong: an unknown key (the message suggests the nearest), a bad value, a
    /// duplicate key, or an option that would do nothing.
    InvalidConfig = 3,
    /// An update gave an invoker a negative weight.
    NegativeWeight = 4,
    /// An update gave two invokers the same id.
    DuplicateId = 5,
    /// An update gave an invoker an id above `i64::MAX` (the C ABI returns ids as `int64_t`).
    IdOutOfRange = 6,
    /// A select found the invoker set empty.
    NoProvider = 7,
    /// A select had no candidate left: every candidate is excluded.
    NoCandidate = 8,
    /// A candidate id passed to a select is not in the current invoker set.
    UnknownCandidate = 9,
    /// A method id that [`Balancer::method`](crate::Balancer::method) did not return.
    UnknownMethod = 10,
    /// C ABI only: an outcome code that is not 0..=3 (see [`Outcome`](crate::Outcome)).
    UnknownOutcome = 11,
    /// C ABI only: the stats buffer is too small; `*len` holds the length needed (without the
    /// NUL).
    BufferTooSmall = 12,
    /// C ABI only: a panic inside polylb was caught at the boundary; the balancer remains
    /// usable.
    Panic = 13,
    /// An argument out of its domain: a negative elapsed time; for provider metrics a NaN,
    /// infinite or negative CPU load, or a negative response time or provider clock; for a
    /// load report a NaN, infinite or negative number, or more errors than queries; an empty
    /// address in an update of `consistenthash`, `boundedhash`, `maglev` or `rendezvous`; in the
    /// C ABI, a length no array can have.
    InvalidArgument = 14,
    /// A limit was exceeded: at most [`MAX_METHODS`](crate::MAX_METHODS) (2^20) method names
    /// per balancer; at most 2^32 − 1 points (`hash.nodes` × invokers) on a hash ring, nor more
    /// than the process can allocate while it is built (about 24 B per point); at most
    /// `maglev.tableSize` invokers in a `maglev` set; a set's weights adding up to at most
    /// 2^54 − 1.
    LimitExceeded = 15,
}

const ALL: [Status; 16] = [
    Status::Ok,
    Status::NullPointer,
    Status::InvalidUtf8,
    Status::InvalidConfig,
    Status::NegativeWeight,
    Status::DuplicateId,
    Status::IdOutOfRange,
    Status::NoProvider,
    Status::NoCandidate,
    Status::UnknownCandidate,
    Status::UnknownMethod,
    Status::UnknownOutcome,
    Status::BufferTooSmall,
    Status::Panic,
    Status::InvalidArgument,
    Status::LimitExceeded,
];

impl Status {
    /// The numeric code, the C ABI's `PLB_OK` / `PLB_ERR_*` value (0..=15).
    pub fn code(self) -> i32 {
        self as i32
    }

    /// Accepts a code or its negation (hot calls return `-status`).
    pub fn from_code(code: i32) -> Option<Status> {
        let c = code.checked_abs()?;
        ALL.get(c as usize).copied()
    }

    /// Static, NUL-terminated text (the C ABI hands out a pointer to it).
    pub(crate) fn message_nul(self) -> &'static str {
        match self {
            Status::Ok => "ok\0",
            Status::NullPointer => {
                "a required pointer is NULL (handle, output, or data with a non-zero length)\0"
            }
            Status::InvalidUtf8 => "text is not valid UTF-8\0",
            Status::InvalidConfig => "invalid configuration\0",
            Status::NegativeWeight => "an invoker weight is negative\0",
            Status::DuplicateId => "an invoker id appears twice in the set\0",
            Status::IdOutOfRange => "an invoker id is above INT64_MAX\0",
            Status::NoProvider => "no provider: the invoker set is empty\0",
            Status::NoCandidate => "no candidate left: every candidate is excluded\0",
            Status::UnknownCandidate => "a candidate id is not in the current invoker set\0",
            Status::UnknownMethod => {
                "unknown method id: use an id the balancer's method(name) lookup returned (plb_balancer_method in C)\0"
            }
            Status::UnknownOutcome => {
                "unknown outcome: expected 0 (success), 1 (failure), 2 (timeout) or 3 (cancelled)\0"
            }
            Status::BufferTooSmall => "buffer too small: the needed length was written to *len\0",
            Status::Panic => {
                "internal error: a panic inside polylb was caught (please report it)\0"
            }
            Status::InvalidArgument => "invalid argument\0",
            Status::LimitExceeded => "limit exceeded\0",
        }
    }

    /// A short static description of the status, the text `plb_status_str` returns (also
    /// what `Display` prints).
    pub fn message(self) -> &'static str {
        let m = self.message_nul();
        &m[..m.len() - 1]
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Status {}

/// Error of a cold call: a status plus a message that names what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What kind of error: the status code the C ABI returns for it.
    pub status: Status,
    /// Human-readable details, e.g. the config key and value at fault (also what `Display`
    /// prints).
    pub message: String,
}

impl Error {
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }
}

impl From<Status> for Error {
    fn from(status: Status) -> Error {
        Error::new(status, status.message())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
