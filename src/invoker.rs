//! One provider as the caller registers it.

/// A provider. `id` is the caller's stable identity (unique in a set, at most `i64::MAX`);
/// `address` (`host:port`) places it on the consistent-hash ring, as Dubbo's URL address does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invoker {
    /// The caller's stable identity: unique in the set, at most `i64::MAX` (else an update is
    /// `IdOutOfRange`); `select` returns it.
    pub id: u64,
    /// `host:port`: places the invoker on the hash ring, in maglev's table or among
    /// rendezvous' scores (must not be empty for `consistenthash`, `boundedhash`, `maglev` and
    /// `rendezvous`, else an update is `InvalidArgument`).
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
    /// An invoker with Dubbo's defaults: weight 100, start time 0 (unknown: no warm-up),
    /// warm-up -1 (the balancer's `warmup`), no zone.
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

    /// Sets the configured weight (at least 0; a negative one is `NegativeWeight` at update).
    pub fn weight(mut self, weight: i32) -> Self {
        self.weight = weight;
        self
    }

    /// Sets the provider's start time in Unix milliseconds (0 or less: unknown, no warm-up).
    pub fn start_time_ms(mut self, start_time_ms: i64) -> Self {
        self.start_time_ms = start_time_ms;
        self
    }

    /// Sets the warm-up period in milliseconds (negative: the balancer's `warmup`; 0: none).
    pub fn warmup_ms(mut self, warmup_ms: i32) -> Self {
        self.warmup_ms = warmup_ms;
        self
    }

    /// Sets the invoker's zone for `zone=` preference (an empty name is no zone, as in the C
    /// ABI).
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
    /// The outcome of a C ABI `PLB_OUTCOME_*` code (0..=3); `None` for any other value.
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
