use super::*;

#[test]
fn defaults_and_values() {
    let c = Config::parse("").unwrap();
    assert_eq!(c, Config::default());
    let c = Config::parse("loadbalance=consistenthash&hash.nodes=10&seed=7").unwrap();
    assert_eq!(c.strategy, StrategyKind::ConsistentHash);
    assert_eq!(c.hash_nodes, 10);
    assert_eq!(c.seed, Some(7));
    assert_eq!(
        Config::parse("loadbalance=").unwrap().strategy,
        StrategyKind::Random
    );
}

#[test]
fn misspelled_key_suggests_nearest() {
    let e = Config::parse("loadBalance=roundrobin").unwrap_err();
    assert_eq!(e.status, Status::InvalidConfig);
    assert!(
        e.message.contains("did you mean 'loadbalance'"),
        "{}",
        e.message
    );
    let e = Config::parse("hash.node=160").unwrap_err();
    assert!(e.message.contains("'hash.nodes'"), "{}", e.message);
    let e = Config::parse("loadbalance=roundrobbin").unwrap_err();
    assert!(e.message.contains("'roundrobin'"), "{}", e.message);
}

#[test]
fn a_suggestion_is_the_nearest_within_half_the_keys_length() {
    let names = ["loadbalance", "seed", "hash.nodes"];
    assert_eq!(values::nearest("LoadBalance", &names), Some("loadbalance"));
    // Two edits from a 4-letter key (its limit), by length alone: still compared.
    assert_eq!(values::nearest("seedxx", &names), Some("seed"));
    assert_eq!(values::nearest("se", &names), Some("seed"));
    // Past the limit by length, whatever the letters.
    assert_eq!(values::nearest("seedxxx", &names), None);
    assert_eq!(values::nearest(&"s".repeat(1 << 20), &names), None);
}

/// A config of a megabyte is refused with a message of about a kilobyte: the caller's text is
/// quoted up to 512 characters and its length said (the library used to quote it whole, and
/// Java's and Go's messages carried the megabyte).
#[test]
fn a_huge_config_is_quoted_short() {
    let huge = "k".repeat(1 << 20);
    let head = "k".repeat(512);
    for (text, want) in [
        (
            format!("{huge}=1"),
            format!("config: unknown key '{head}…' (1048576 bytes)"),
        ),
        (
            huge.clone(),
            format!("config: '{head}…' (1048576 bytes) has no '='"),
        ),
        (
            format!("loadbalance={huge}"),
            format!("config: loadbalance='{head}…' (1048576 bytes) is an unknown strategy"),
        ),
        (
            format!("timeout={huge}"),
            format!("config: timeout='{head}…' (1048576 bytes) is not an integer"),
        ),
    ] {
        let e = Config::parse(&text).unwrap_err();
        assert!(e.message.starts_with(&want), "{}", &e.message[..200]);
        assert!(e.message.len() < 1_500, "{} bytes", e.message.len());
    }
    // Up to 512 characters the text is quoted whole, escaped; a multi-byte character counts
    // as one.
    let e = Config::parse(&format!("{}=1", "é".repeat(512))).unwrap_err();
    let want = format!("config: unknown key '{}' (known", "é".repeat(512));
    assert!(e.message.starts_with(&want), "{}", e.message);
    let e = Config::parse(&format!("{}=1", "é".repeat(513))).unwrap_err();
    let want = format!(
        "config: unknown key '{}…' (1026 bytes) (known",
        "é".repeat(512)
    );
    assert!(e.message.starts_with(&want), "{}", e.message);
    let e = Config::parse("a\u{0}b=1").unwrap_err();
    assert!(
        e.message.starts_with("config: unknown key 'a\\0b' (known"),
        "{}",
        e.message
    );
}

/// Each field one step outside its range, with the key the error must name. A hand-built
/// config gets the error the same value in a config string gets.
#[test]
fn hand_built_configs_out_of_range_are_errors_naming_the_key() {
    type Break = fn(&mut Config);
    let cases: &[(&str, Break, &str)] = &[
        ("hash.nodes", |c| c.hash_nodes = 3, "hash.nodes=3"),
        ("hash.nodes", |c| c.hash_nodes = 65537, "hash.nodes=65537"),
        ("timeout", |c| c.timeout_ms = -1, "timeout=-1"),
        ("p2c.choices", |c| c.p2c_choices = 1, "p2c.choices=1"),
        ("p2c.choices", |c| c.p2c_choices = 17, "p2c.choices=17"),
        (
            "peakewma.choices",
            |c| c.peakewma.choices = 1,
            "peakewma.choices=1",
        ),
        (
            "peakewma.decay",
            |c| c.peakewma.decay_ms = 0,
            "peakewma.decay=0",
        ),
        (
            "peakewma.failurePenalty",
            |c| c.peakewma.failure_penalty_ms = -1,
            "peakewma.failurePenalty=-1",
        ),
        (
            "peakewma.preferenceMs",
            |c| c.peakewma.preference_ms = -1,
            "peakewma.preferenceMs=-1",
        ),
        (
            "boundedhash.factor",
            |c| c.boundedhash_factor = 0.99,
            "boundedhash.factor=0.99",
        ),
        (
            "boundedhash.factor",
            |c| c.boundedhash_factor = f64::NAN,
            "boundedhash.factor=NaN",
        ),
        ("zone", |c| c.zone = Some(String::new()), ""),
        (
            "zone.minHealthyPercent",
            |c| c.zone_min_healthy_percent = 0,
            "zone.minHealthyPercent=0",
        ),
        (
            "outlier.failureRate",
            |c| c.outlier.failure_rate_percent = 101,
            "outlier.failureRate=101",
        ),
        (
            "outlier.windowMs",
            |c| c.outlier.window_ms = 0,
            "outlier.failureRate=5&outlier.windowMs=0",
        ),
        (
            "outlier.minRequests",
            |c| c.outlier.min_requests = 0,
            "outlier.failureRate=5&outlier.minRequests=0",
        ),
        (
            "outlier.baseEjectionMs",
            |c| c.outlier.base_ejection_ms = 0,
            "outlier.consecutiveFailures=5&outlier.baseEjectionMs=0",
        ),
        (
            "outlier.maxEjectionMs",
            |c| c.outlier.max_ejection_ms = 29_999,
            "outlier.consecutiveFailures=5&outlier.maxEjectionMs=29999",
        ),
        (
            "outlier.maxEjectionPercent",
            |c| c.outlier.max_ejection_percent = 101,
            "outlier.consecutiveFailures=5&outlier.maxEjectionPercent=101",
        ),
        (
            "slowstart.windowMs",
            |c| c.slow_start.window_ms = -1,
            "loadbalance=p2c&slowstart.windowMs=-1",
        ),
        (
            "slowstart.minWeightPercent",
            |c| c.slow_start.min_weight_percent = 0,
            "loadbalance=p2c&slowstart.windowMs=1&slowstart.minWeightPercent=0",
        ),
        (
            "slowstart.aggression",
            |c| c.slow_start.aggression = 10.5,
            "loadbalance=p2c&slowstart.windowMs=1&slowstart.aggression=10.5",
        ),
    ];
    for (key, break_it, text) in cases {
        let mut config = Config::default();
        break_it(&mut config);
        let e = config.validate().unwrap_err();
        assert_eq!(e.status, Status::InvalidConfig, "{key}");
        assert!(e.message.contains(key), "{key}: {}", e.message);
        let e = crate::Balancer::with_config(config).expect_err(key);
        assert!(e.message.contains(key), "{key}: {}", e.message);
        if !text.is_empty() {
            let e = Config::parse(text).unwrap_err();
            assert!(e.message.contains(key), "{text}: {}", e.message);
        }
    }
}

/// The edges of every range are accepted, by hand and as text alike.
#[test]
fn range_edges_are_accepted() {
    let text = "loadbalance=p2c&hash.nodes=4&p2c.choices=16\
                &zone=a&zone.minHealthyPercent=1&outlier.failureRate=100&outlier.windowMs=1\
                &outlier.minRequests=1&outlier.baseEjectionMs=1&outlier.maxEjectionMs=1\
                &outlier.maxEjectionPercent=0&slowstart.windowMs=1\
                &slowstart.minWeightPercent=100&slowstart.aggression=0.1";
    let config = Config::parse(text).unwrap();
    assert_eq!(config.hash_nodes, 4);
    config.validate().unwrap();
    Config::parse("loadbalance=boundedhash&boundedhash.factor=100").unwrap();
    let p2c = Config {
        strategy: StrategyKind::P2c,
        hash_nodes: 65536,
        p2c_choices: 0,
        slow_start: SlowStartConfig {
            window_ms: 1,
            aggression: 10.0,
            ..Config::default().slow_start
        },
        ..Config::default()
    };
    let peakewma = Config {
        strategy: StrategyKind::PeakEwma,
        peakewma: PeakEwmaConfig {
            choices: 16,
            failure_penalty_ms: 0,
            ..Config::default().peakewma
        },
        ..Config::default()
    };
    let boundedhash = Config {
        strategy: StrategyKind::BoundedHash,
        boundedhash_factor: 1.0,
        ..Config::default()
    };
    for config in [p2c, peakewma, boundedhash] {
        crate::Balancer::with_config(config).unwrap();
    }
}

/// A hand-built config is refused what a config string is refused, options that would do
/// nothing or harm included (the fields unlike the defaults count as set), and given
/// what a string gives.
#[test]
fn hand_built_configs_are_checked_as_strings_are() {
    type Set = fn(&mut Config);
    let refused: &[(&str, Set, &str)] = &[
        (
            "subset.size",
            |c| {
                c.strategy = StrategyKind::ConsistentHash;
                c.subset.size = 4;
                c.subset.key = Some("a".into());
            },
            "loadbalance=consistenthash&subset.size=4&subset.key=a",
        ),
        (
            "subset.size",
            |c| {
                c.subset.size = 4;
                c.subset.key = Some("a".into());
            },
            "subset.size=4&subset.key=a",
        ),
        ("subset.size", |c| c.subset.size = 4, "subset.size=4"),
        (
            "subset.index",
            |c| {
                c.strategy = StrategyKind::LeastActive;
                c.subset.size = 4;
                c.subset.key = Some("a".into());
                c.subset.index = Some(1);
            },
            "loadbalance=leastactive&subset.size=4&subset.key=a&subset.index=1",
        ),
        (
            "slowstart.windowMs",
            |c| c.slow_start.window_ms = 1000,
            "slowstart.windowMs=1000",
        ),
        (
            "slowstart.windowMs",
            |c| {
                c.strategy = StrategyKind::Maglev;
                c.slow_start.window_ms = 1000;
            },
            "loadbalance=maglev&slowstart.windowMs=1000",
        ),
        (
            "p2c.choices",
            |c| {
                c.strategy = StrategyKind::PeakEwma;
                c.p2c_choices = 0;
            },
            "loadbalance=peakewma&p2c.choices=0",
        ),
        (
            "outlier.windowMs",
            |c| c.outlier.window_ms = 5,
            "outlier.windowMs=5",
        ),
    ];
    for (key, set, text) in refused {
        let mut config = Config::default();
        set(&mut config);
        let by_hand = crate::Balancer::with_config(config).expect_err(text);
        let by_text = Config::parse(text).unwrap_err();
        assert_eq!(by_hand.status, Status::InvalidConfig, "{text}");
        assert!(by_hand.message.contains(key), "{text}: {}", by_hand.message);
        assert_eq!(by_hand.message, by_text.message, "{text}");
    }
    let text = "loadbalance=leastactive&subset.size=4&subset.index=3&zone=a\
                &outlier.failureRate=20&outlier.windowMs=5&subset.minHealthyPercent=50";
    let parsed = Config::parse(text).unwrap();
    crate::Balancer::with_config(parsed.clone()).unwrap();
    let mut by_hand = Config {
        strategy: StrategyKind::LeastActive,
        zone: Some("a".into()),
        ..Config::default()
    };
    by_hand.subset.size = 4;
    by_hand.subset.index = Some(3);
    by_hand.subset.min_healthy_percent = 50;
    by_hand.outlier.failure_rate_percent = 20;
    by_hand.outlier.window_ms = 5;
    assert_eq!(by_hand, parsed);
    crate::Balancer::with_config(by_hand).unwrap();
}

/// `changed_keys` (what `Config::check` takes as set in a hand-built config) knows every
/// key: each one set alone is the one changed key.
#[test]
fn every_key_set_alone_is_the_one_changed() {
    for (key, _, set) in KEYS {
        let mut config = Config::default();
        set(
            &mut config,
            key,
            if *key == "loadbalance" { "p2c" } else { "7" },
        )
        .unwrap();
        assert_eq!(config.changed_keys(), [*key]);
    }
}

/// Left out, the longest ejection is the default or the first ejection, whichever is
/// longer; given below the first, it is an error naming both.
#[test]
fn the_longest_ejection_follows_a_longer_first_one_unless_given() {
    let c = Config::parse("outlier.consecutiveFailures=5&outlier.baseEjectionMs=400000").unwrap();
    assert_eq!(
        (c.outlier.base_ejection_ms, c.outlier.max_ejection_ms),
        (400_000, 400_000)
    );
    let c = Config::parse("outlier.consecutiveFailures=5&outlier.baseEjectionMs=1000").unwrap();
    assert_eq!(c.outlier.max_ejection_ms, 300_000);
    let e = Config::parse(
        "outlier.consecutiveFailures=5&outlier.baseEjectionMs=400000\
         &outlier.maxEjectionMs=300000",
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        "config: outlier.maxEjectionMs='300000' is below outlier.baseEjectionMs=400000 (the \
         longest ejection must be at least the first)"
    );
}

#[test]
fn bad_values() {
    for text in [
        "hash.nodes=3",
        "hash.nodes=65537",
        "hash.nodes=x",
        "timeout=0",
        "shortestresponse.slidePeriod=1.5",
        "seed=-1",
        "loadbalance",
        "seed=1&seed=2",
    ] {
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.status, Status::InvalidConfig, "{text}");
    }
}

#[test]
fn an_integer_out_of_range_is_told_its_range() {
    let e = Config::parse("seed=-1").unwrap_err();
    assert!(
        e.message
            .contains("out of range (accepted: 0..=18446744073709551615)"),
        "{}",
        e.message
    );
    let e = Config::parse("warmup=2147483648").unwrap_err();
    assert!(
        e.message.contains("(accepted: -2147483648..=2147483647)"),
        "{}",
        e.message
    );
    // A key narrower than its type gives its own range, whether the value fits the type
    // or not.
    for (text, range) in [
        ("hash.nodes=-1", "4..=65536"),
        ("hash.nodes=3", "4..=65536"),
        ("hash.nodes=65537", "4..=65536"),
        (
            "loadbalance=p2c&p2c.choices=-3",
            "0 (every candidate) or 2..=16",
        ),
        (
            "loadbalance=p2c&p2c.choices=1",
            "0 (every candidate) or 2..=16",
        ),
        ("outlier.failureRate=-1", "0..=100"),
        ("outlier.failureRate=101", "0..=100"),
        ("timeout=0", "1..=2147483647"),
        (
            "loadbalance=peakewma&peakewma.decay=0",
            "1..=9223372036854775807",
        ),
        (
            "loadbalance=maglev&maglev.tableSize=9",
            "a prime in 7..=16777213",
        ),
        (
            "loadbalance=boundedhash&boundedhash.factor=0.5",
            "1.0..=100",
        ),
    ] {
        let e = Config::parse(text).unwrap_err();
        assert!(
            e.message.ends_with(&format!("(accepted: {range})")),
            "{text}: {}",
            e.message
        );
    }
    let e = Config::parse("hash.nodes=abc").unwrap_err();
    assert!(
        e.message
            .ends_with("is not an integer (accepted: 4..=65536)"),
        "{}",
        e.message
    );
    let e = Config::parse(&format!("seed={}", "9".repeat(40))).unwrap_err();
    assert!(e.message.contains("out of range"), "{}", e.message);
}

/// A range error quotes the value as written: a fraction printed back as a number read
/// `orca.errorPenalty='10000000000000000'` for `1e+16`.
#[test]
fn a_value_out_of_range_is_quoted_as_written() {
    for (text, quoted) in [
        (
            "loadbalance=orca&orca.errorPenalty=1e+16",
            "orca.errorPenalty='1e+16'",
        ),
        (
            "loadbalance=p2c&slowstart.windowMs=1000&slowstart.aggression=00.05",
            "slowstart.aggression='00.05'",
        ),
        (
            "loadbalance=boundedhash&boundedhash.factor=150e0",
            "boundedhash.factor='150e0'",
        ),
        ("hash.nodes=+3", "hash.nodes='+3'"),
        ("loadbalance=p2c&p2c.choices=017", "p2c.choices='017'"),
    ] {
        let e = Config::parse(text).unwrap_err();
        assert!(
            e.message.starts_with(&format!("config: {quoted} is ")),
            "{text}: {}",
            e.message
        );
    }
    // A hand-built config has no text: its value as it prints.
    let hand_built = Config {
        boundedhash_factor: 150.0,
        ..Config::default()
    };
    let e = hand_built.validate().unwrap_err();
    assert!(
        e.message.contains("boundedhash.factor='150'"),
        "{}",
        e.message
    );
}

/// A hand-built config reads as the same keys in a string do: the longest ejection left at its
/// default follows a longer first one (`with_config` refused what `parse` accepted).
#[test]
fn a_hand_built_longest_ejection_left_at_its_default_follows_the_first() {
    let hand_built = Config {
        outlier: OutlierConfig {
            consecutive_failures: 5,
            base_ejection_ms: 600_000,
            ..Default::default()
        },
        ..Config::default()
    };
    let parsed = Config::parse("outlier.consecutiveFailures=5&outlier.baseEjectionMs=600000");
    assert_eq!(hand_built.check(), Ok(()));
    assert_eq!(Ok(hand_built.clone().settled()), parsed);
    let b = crate::Balancer::with_config(hand_built).unwrap();
    assert!(b.stats_json(0).starts_with("{\"strategy\":\"random\""));
    // Set below the first ejection (not left at its default), it is the error it is in a string.
    let shorter = Config {
        outlier: OutlierConfig {
            consecutive_failures: 5,
            base_ejection_ms: 600_000,
            max_ejection_ms: 400_000,
            ..Default::default()
        },
        ..Config::default()
    };
    let e = shorter.check().unwrap_err();
    assert!(
        e.message.contains("is below outlier.baseEjectionMs=600000"),
        "{}",
        e.message
    );
}
