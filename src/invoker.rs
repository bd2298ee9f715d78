//! One provider as the caller registers it.

/// A provider. `id` is the caller's stable identity (unique in a set, at most `i64::MAX`);
/// `address` (`host:port`) places it on the consistent-hash ring, as Dubbo's URL address does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invoker {
    pub id: u64,
    pub address: String,
    /// Configured weight, at least 0 (Dubbo's default is 100).
    pub weight: i32,
    /// Provider start time in Unix milliseconds; 0 or less means unknown, so no warm-up.
    pub start_time_ms: i64,
    /// Warm-up period in milliseconds; negative means the balancer's `warmup` (Dubbo: 600000).
    pub warmup_ms: i32,
    /// Zone for `zone=` preference; `None` or an empty name is no zone (as in the C ABI).
    pub zone: Option<String>,
}

impl Invoker {
    pub fn new(id: u64, address: impl Into<String>) -> Invoker {
        Invoker {
            id,
            address: address.into(),
            weight: 100,
            start_time_ms: 0,
            warmup_ms: -1,
            zone: None,
        }
    }

    pub fn weight(mut self, weight: i32) -> Self {
        self.weight = weight;
        self
    }

    pub fn start_time_ms(mut self, start_time_ms: i64) -> Self {
        self.start_time_ms = start_time_ms;
        self
    }

    pub fn warmup_ms(mut self, warmup_ms: i32) -> Self {
        self.warmup_ms = warmup_ms;
        self
    }

    pub fn zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }
}

/// How a call ended, as reported by the caller: a verdict on the provider, not on the request
/// (docs/outcomes.md maps gRPC and HTTP statuses).
#[repr(i32)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The provider answered, also with an error of the service's own (a business exception, a
    /// gRPC NOT_FOUND, an HTTP 404): its latency feeds the latency-aware strategies.
    Success = 0,
    /// The provider could not serve (refused, reset, unavailable, overloaded, broken).
    Failure = 1,
    /// The caller's deadline passed before the answer: a failure, also counted as a timeout.
    Timeout = 2,
    /// Never sent, or given up with no verdict on the provider (cancelled by its caller): only
    /// the in-flight count is undone; no latency, not a failure.
    Cancelled = 3,
}

impl Outcome {
    pub fn from_code(code: i32) -> Option<Outcome> {
        match code {
            0 => Some(Outcome::Success),
            1 => Some(Outcome::Failure),
            2 => Some(Outcome::Timeout),
            3 => Some(Outcome::Cancelled),
            _ => None,
        }
    }
}
