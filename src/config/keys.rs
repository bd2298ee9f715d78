//! Every accepted key: its name, a one-line description, and how its value is read into a
//! [`Config`].

use super::values::{bad, float, int, nearest};
use super::Config;
use crate::error::Error;
use crate::strategy::StrategyKind;

pub(super) type Setter = fn(&mut Config, &str, &str) -> Result<(), Error>;

/// Every accepted key, what it means, and how it is parsed.
pub(super) const KEYS: &[(&str, &str, Setter)] = &[
    ("loadbalance", "strategy name", |c, k, v| {
        c.strategy = StrategyKind::from_name(v).ok_or_else(|| {
            let names: Vec<&str> = StrategyKind::ALL.iter().map(|s| s.name()).collect();
            let hint = nearest(v, &names)
                .map(|n| format!(" (did you mean '{n}'?)"))
                .unwrap_or_default();
            bad(
                k,
                v,
                &format!("an unknown strategy{hint}; known: {}", names.join(", ")),
            )
        })?;
        Ok(())
    }),
    (
        "hash.nodes",
        "virtual nodes per invoker, 4..=65536 (rounded down to a multiple of 4)",
        |c, k, v| {
            c.hash_nodes = int(k, v)?;
            Ok(())
        },
    ),
    (
        "warmup",
        "default warm-up in ms; 0 or less: none",
        |c, k, v| {
            c.warmup_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "shortestresponse.slidePeriod",
        "shortestresponse's window in ms: the first pick more than this after the window began \
         resets it, so any whole number is taken (0: the first pick 1 ms or more on; negative: \
         every pick) (default 30000)",
        |c, k, v| {
            c.slide_period_ms = int(k, v)?;
            Ok(())
        },
    ),
    ("timeout", "adaptive's timeout in ms, > 0", |c, k, v| {
        c.timeout_ms = int(k, v)?;
        Ok(())
    }),
    ("seed", "u64 seed for reproducible choices", |c, k, v| {
        c.seed = Some(int(k, v)?);
        Ok(())
    }),
    (
        "p2c.choices",
        "p2c: candidates drawn (by weight) and compared per pick, 2..=16; 0 = all (default 2)",
        |c, k, v| {
            c.p2c_choices = int(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.choices",
        "peakewma: candidates compared per pick before it escalates (up to 8 more, or all) \
         because the best looks slow, 2..=16; 0 = all (default 2)",
        |c, k, v| {
            c.peakewma.choices = int(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.decay",
        "peakewma: time constant of the latency average in ms, > 0; also bounds how long a \
         slow invoker goes unprobed (default 10000)",
        |c, k, v| {
            c.peakewma.decay_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.failurePenalty",
        "peakewma: latency in ms recorded for a failed or timed-out call (at least its elapsed \
         time), so fast failures do not look fast; a failing invoker is probed again after \
         this long (at most peakewma.decay, after which the estimate has faded too), then \
         twice as late each time; 0 = elapsed time only (default 1000)",
        |c, k, v| {
            c.peakewma.failure_penalty_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "peakewma.preferenceMs",
        "peakewma: between invokers of equivalent latency, equal weight and equal calls in \
         flight, prefer this balancer's own order (a hash of the ids), renewed every this many \
         ms, instead of the first drawn; helps many consumers each with few calls in flight; \
         0 = off (default 0)",
        |c, k, v| {
            c.peakewma.preference_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "boundedhash.factor",
        "boundedhash: an invoker keeps a key while its calls in flight, the new one counted, \
         stay within ceil(factor x weighted average); 1.0..=100 (default 1.25)",
        |c, k, v| {
            c.boundedhash_factor = float(k, v)?;
            Ok(())
        },
    ),
    (
        "zone",
        "zone preference (every strategy): this consumer's zone; invokers of the same zone are \
         preferred while enough of them are healthy",
        |c, _, v| {
            c.zone = Some(v.to_string());
            Ok(())
        },
    ),
    (
        "zone.minHealthyPercent",
        "zone preference: all traffic stays local while at least this percentage of local \
         invokers is healthy (not ejected); below, the local share shrinks in proportion \
         and the rest spills over to every healthy invoker; 1..=100 (default 70)",
        |c, k, v| {
            c.zone_min_healthy_percent = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.consecutiveFailures",
        "outlier ejection (every strategy): eject an invoker after this many consecutive \
         failures or timeouts; 0 = rule off (default 0)",
        |c, k, v| {
            c.outlier.consecutive_failures = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.failureRate",
        "outlier ejection: eject an invoker whose failures reach this percentage of its calls in \
         a window (outlier.windowMs, at least outlier.minRequests calls); 0 = rule off (default 0)",
        |c, k, v| {
            c.outlier.failure_rate_percent = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.windowMs",
        "outlier ejection: window of the failure-rate rule in ms, > 0 (default 10000)",
        |c, k, v| {
            c.outlier.window_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.minRequests",
        "outlier ejection: calls a window needs before the failure-rate rule applies, > 0 \
         (default 20)",
        |c, k, v| {
            c.outlier.min_requests = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.baseEjectionMs",
        "outlier ejection: length of a first ejection in ms; the n-th ejection in a row lasts n \
         times as long (one step is forgiven per base period without ejection), > 0 \
         (default 30000)",
        |c, k, v| {
            c.outlier.base_ejection_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.maxEjectionMs",
        "outlier ejection: longest ejection in ms, at least outlier.baseEjectionMs (default \
         300000, or outlier.baseEjectionMs when that is longer)",
        |c, k, v| {
            c.outlier.max_ejection_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "outlier.maxEjectionPercent",
        "outlier ejection: at most this percentage of the set is ejected at once (at least one \
         invoker, never all of them; of the weighted ones while there are any, where weight 0 \
         drains; 0 = never eject), 0..=100 (default 10)",
        |c, k, v| {
            c.outlier.max_ejection_percent = int(k, v)?;
            Ok(())
        },
    ),
    (
        "slowstart.windowMs",
        "slow start (p2c, peakewma, boundedhash): an invoker that joins an existing set ramps \
         its weight up over this many ms (on top of Dubbo's warm-up); 0 = off (default 0)",
        |c, k, v| {
            c.slow_start.window_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "slowstart.minWeightPercent",
        "slow start: weight at the start of the window, percent of the full weight, 1..=100 \
         (default 10)",
        |c, k, v| {
            c.slow_start.min_weight_percent = int(k, v)?;
            Ok(())
        },
    ),
    (
        "slowstart.aggression",
        "slow start: ramp shape, weight ~ (elapsed / window)^(1 / aggression); 1.0 is linear, \
         > 1 ramps faster early; 0.1..=10 (default 1.0)",
        |c, k, v| {
            c.slow_start.aggression = float(k, v)?;
            Ok(())
        },
    ),
    (
        "maglev.tableSize",
        "maglev: slots of the lookup table, a prime in 7..=16777213, at least the number of \
         invokers (about 100 times it spreads keys within 1 %); changing it remaps most keys \
         (default 65537)",
        |c, k, v| {
            c.maglev_table_size = int(k, v)?;
            Ok(())
        },
    ),
    (
        "subset.size",
        "subsetting: this consumer prefers this many invokers (within its zone when zone is \
         set), chosen by rendezvous hashing of subset.key with their addresses \
         (leastactive, shortestresponse, adaptive, p2c, peakewma) or by subset.index (also \
         random, roundrobin and orca); 0 = off (default 0)",
        |c, k, v| {
            c.subset.size = int(k, v)?;
            Ok(())
        },
    ),
    (
        "subset.key",
        "subsetting: this consumer's identity, e.g. its host name and service; different keys \
         take different subsets, the same key the same subset of the same set (subset.size needs \
         this or subset.index)",
        |c, _, v| {
            c.subset.key = Some(v.to_string());
            Ok(())
        },
    ),
    (
        "subset.minHealthyPercent",
        "subsetting: all traffic stays in the subset while at least this percentage of it is \
         healthy (not ejected); below, the subset's share shrinks in proportion and the rest \
         spills over to every healthy invoker; 1..=100 (default 70)",
        |c, k, v| {
            c.subset.min_healthy_percent = int(k, v)?;
            Ok(())
        },
    ),
    (
        "subset.index",
        "subsetting: this consumer's index among the consumers of the service, 0, 1, 2, … (a \
         pod's ordinal, say), instead of subset.key: consumers 0 to C-1 take subsets that hold \
         every invoker equally often, within one while subset.size <= (n + 3) / 3 or divides the n \
         invokers (beyond, the counts drift apart as C grows); 0..=4294967295",
        |c, k, v| {
            c.subset.index = Some(int(k, v)?);
            Ok(())
        },
    ),
    (
        "orca.blackoutMs",
        "orca: a provider's reported weight counts only this many ms after the first report \
         of a run of reports (until then it takes the mean weight), >= 0 (default 10000)",
        |c, k, v| {
            c.orca.blackout_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "orca.expirationMs",
        "orca: a reported weight not renewed for this many ms lapses, and the next report \
         starts a new blackout, > 0 (default 180000)",
        |c, k, v| {
            c.orca.expiration_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "orca.updateMs",
        "orca: the weights are recomputed from the reports every this many ms, > 0 (default \
         1000)",
        |c, k, v| {
            c.orca.update_ms = int(k, v)?;
            Ok(())
        },
    ),
    (
        "orca.errorPenalty",
        "orca: how much errors weigh, weight = qps / (utilization + eps / qps x errorPenalty); \
         0..=100 (default 1.0)",
        |c, k, v| {
            c.orca.error_penalty = float(k, v)?;
            Ok(())
        },
    ),
];
