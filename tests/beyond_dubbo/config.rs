//! Configuration.

use crate::helpers::*;
use polylb::{Balancer, Status, StrategyKind};

#[test]
fn new_names_and_keys_parse() {
    for name in NEW {
        let b = Balancer::new(&format!("loadbalance={name}")).unwrap();
        assert_eq!(b.strategy_name(), name);
        assert!(StrategyKind::from_name(name).unwrap().is_beyond_dubbo());
    }
    let c = polylb::Config::parse(
        "loadbalance=peakewma&peakewma.choices=3&peakewma.decay=5000&peakewma.failurePenalty=0\
         &peakewma.preferenceMs=250&zone=z1&zone.minHealthyPercent=50\
         &outlier.consecutiveFailures=3&outlier.failureRate=40&outlier.windowMs=2000\
         &outlier.minRequests=5&outlier.baseEjectionMs=100&outlier.maxEjectionMs=1000\
         &outlier.maxEjectionPercent=50&slowstart.windowMs=30000&slowstart.minWeightPercent=5\
         &slowstart.aggression=2.5",
    )
    .unwrap();
    assert_eq!(c.peakewma.choices, 3);
    assert_eq!(c.peakewma.decay_ms, 5000);
    assert_eq!(c.peakewma.failure_penalty_ms, 0);
    assert_eq!(c.peakewma.preference_ms, 250);
    assert_eq!(polylb::Config::default().peakewma.preference_ms, 0);
    let p2c = polylb::Config::parse("loadbalance=p2c&p2c.choices=0").unwrap();
    assert_eq!(p2c.p2c_choices, 0);
    let bounded = polylb::Config::parse("loadbalance=boundedhash&boundedhash.factor=1.5").unwrap();
    assert_eq!(bounded.boundedhash_factor, 1.5);
    assert_eq!(c.zone.as_deref(), Some("z1"));
    assert_eq!(c.zone_min_healthy_percent, 50);
    assert_eq!(c.outlier.consecutive_failures, 3);
    assert_eq!(c.outlier.failure_rate_percent, 40);
    assert_eq!(c.outlier.max_ejection_percent, 50);
    assert_eq!(c.slow_start.window_ms, 30000);
    assert_eq!(c.slow_start.aggression, 2.5);
    let keys: Vec<&str> = polylb::Config::keys().map(|(k, _)| k).collect();
    for k in [
        "p2c.choices",
        "peakewma.decay",
        "boundedhash.factor",
        "zone",
        "outlier.baseEjectionMs",
    ] {
        assert!(keys.contains(&k), "{k} missing from the key table");
    }
}

#[test]
fn options_that_would_do_nothing_are_errors() {
    for (text, mention) in [
        ("p2c.choices=1", "p2c.choices"),
        ("p2c.choices=17", "p2c.choices"),
        ("peakewma.decay=0", "peakewma.decay"),
        ("peakewma.failurePenalty=-1", "peakewma.failurePenalty"),
        ("peakewma.preferenceMs=-1", "peakewma.preferenceMs"),
        ("boundedhash.factor=0.9", "boundedhash.factor"),
        ("boundedhash.factor=nan", "boundedhash.factor"),
        ("zone.minHealthyPercent=50", "zone"),
        ("zone=a&zone.minHealthyPercent=0", "zone.minHealthyPercent"),
        ("outlier.baseEjectionMs=100", "outlier.consecutiveFailures"),
        (
            "outlier.consecutiveFailures=3&outlier.windowMs=5000",
            "outlier.failureRate",
        ),
        (
            "outlier.consecutiveFailures=3&outlier.minRequests=5",
            "outlier.failureRate",
        ),
        (
            "outlier.failureRate=0&outlier.consecutiveFailures=3&outlier.minRequests=5",
            "outlier.failureRate",
        ),
        ("zone=a&zone.minHealthyPercent=50", "outlier ejection"),
        // A strategy's own options, given to another strategy (a slip, not a setting).
        ("loadbalance=peakewma&p2c.choices=0", "loadbalance=p2c only"),
        (
            "loadbalance=p2c&peakewma.choices=0",
            "loadbalance=peakewma only",
        ),
        ("peakewma.preferenceMs=1000", "loadbalance=peakewma only"),
        (
            "loadbalance=consistenthash&boundedhash.factor=2",
            "loadbalance=boundedhash only",
        ),
        // In any order, and with an empty (absent) window.
        (
            "loadbalance=p2c&slowstart.minWeightPercent=20&slowstart.windowMs=0",
            "slowstart.windowMs",
        ),
        (
            "loadbalance=p2c&slowstart.windowMs=0&slowstart.minWeightPercent=20",
            "slowstart.minWeightPercent",
        ),
        (
            "loadbalance=p2c&slowstart.windowMs=&slowstart.aggression=2",
            "slowstart.aggression",
        ),
        ("outlier.failureRate=101", "outlier.failureRate"),
        (
            "outlier.consecutiveFailures=2&outlier.baseEjectionMs=500000&outlier.maxEjectionMs=400000",
            "outlier.maxEjectionMs",
        ),
        (
            "loadbalance=random&slowstart.windowMs=1000",
            "p2c, peakewma and boundedhash",
        ),
        (
            "loadbalance=p2c&slowstart.aggression=2",
            "slowstart.windowMs",
        ),
        (
            "loadbalance=p2c&slowstart.aggression=0",
            "slowstart.aggression",
        ),
        (
            "outlier.consecutivefailures=3",
            "did you mean 'outlier.consecutiveFailures'",
        ),
    ] {
        let e = Balancer::new(text)
            .err()
            .unwrap_or_else(|| panic!("{text} accepted"));
        assert_eq!(e.status, Status::InvalidConfig, "{text}");
        assert!(e.message.contains(mention), "{text}: {}", e.message);
    }
}

#[test]
fn options_with_empty_values_are_absent() {
    // An empty value means "absent" (as in Dubbo): the default stays, and an absent option
    // cannot be one that would do nothing.
    for text in [
        "loadbalance=random&p2c.choices=",
        "loadbalance=roundrobin&slowstart.windowMs=&slowstart.aggression=",
        "outlier.windowMs=&outlier.baseEjectionMs=",
        "zone=&zone.minHealthyPercent=",
        "loadbalance=p2c&slowstart.windowMs=&slowstart.minWeightPercent=",
        "outlier.consecutiveFailures=3&outlier.minRequests=",
    ] {
        let b = Balancer::new(text).unwrap_or_else(|e| panic!("{text}: {}", e.message));
        drop(b);
    }
    // A value given twice is still an error, empty or not.
    assert!(Balancer::new("seed=&seed=1").is_err());
}

#[test]
fn outlier_rules_given_as_0_are_off_not_errors() {
    // 0 is each rule's documented "off", as slowstart.windowMs=0 is slow start's: given on its
    // own it turns ejection off, it is not an option that would do nothing (the error said
    // "set outlier.consecutiveFailures ... to enable" to the config that had just set it).
    for text in [
        "outlier.consecutiveFailures=0",
        "outlier.failureRate=0",
        "loadbalance=p2c&outlier.consecutiveFailures=0&outlier.failureRate=0",
        "loadbalance=p2c&slowstart.windowMs=0",
    ] {
        let b = Balancer::new(text).unwrap_or_else(|e| panic!("{text}: {}", e.message));
        assert!(!b.config().outlier.enabled(), "{text}");
    }
    // The other outlier keys still need a rule that is on.
    let text = "outlier.consecutiveFailures=0&outlier.baseEjectionMs=100";
    let e = Balancer::new(text)
        .err()
        .unwrap_or_else(|| panic!("{text} accepted"));
    assert_eq!(e.status, Status::InvalidConfig);
    assert!(
        e.message.contains("outlier.baseEjectionMs has no effect"),
        "{text}: {}",
        e.message
    );
}
