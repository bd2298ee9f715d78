//! The configuration the docs show is configuration the library accepts: every config string and
//! simulator strategy spec written in a tracked Markdown file parses, every config key they name
//! exists, and the key tables (README's and docs/strategies.md's) list exactly the library's keys,
//! with its defaults, and README's strategy table exactly its strategies. A renamed key, a changed
//! default or a typo in a doc fails here, not in a user's first run.

use polylb::{Config, Status, StrategyKind};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// Config strings the docs give as examples of what is rejected.
const SHOWN_AS_ERRORS: &[&str] = &["loadbalance=peakewma&p2c.choices=0"];

/// Dotted names in the docs that are not polylb config keys: URL parameters that the Dubbo
/// adapter reads (bindings/java/README.md).
const NOT_POLYLB_KEYS: &[&str] = &["hash.arguments"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every tracked Markdown file, with its text.
fn docs() -> Vec<(String, String)> {
    let out = Command::new("git")
        .args(["ls-files", "*.md"])
        .current_dir(root())
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git ls-files failed");
    let files: Vec<(String, String)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|f| {
            let text = std::fs::read_to_string(root().join(f)).unwrap();
            (f.to_string(), text)
        })
        .collect();
    assert!(files.iter().any(|(f, _)| f == "docs/strategies.md"));
    files
}

/// The inline code spans of a Markdown text (`like this`), fenced blocks left out.
fn code_spans(text: &str) -> Vec<&str> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
            spans.push(span);
        }
        // An odd count leaves the last piece outside any span, as Markdown does.
    }
    spans
}

fn is_strategy(name: &str) -> bool {
    StrategyKind::from_name(name).is_some()
}

/// `key=value` pairs joined by `&`, every value concrete (no `<name>`, `…`, `N`, `d`): a string
/// a reader can copy as it is.
fn concrete_pairs(text: &str) -> bool {
    text.split('&').all(|pair| {
        pair.split_once('=').is_some_and(|(k, v)| {
            !k.is_empty()
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '.')
                && !v.is_empty()
                && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '.')
                && (v.chars().all(|c| c.is_ascii_digit() || c == '.') || is_strategy(v))
        })
    })
}

/// Every config string a doc shows: `loadbalance=…` spans, and simulator / hotpath specs
/// (`name&key=value…`, quoted, alone or in a comma-separated `--strategies` list, also in fenced
/// blocks), each as the config string the library gets (with its file, for the message).
fn shown_configs() -> Vec<(String, String)> {
    let mut configs = Vec::new();
    for (file, text) in docs() {
        for span in code_spans(&text) {
            let span = span.trim_matches(|c| c == '"' || c == '\'');
            if span.starts_with("loadbalance=") && concrete_pairs(span) {
                configs.push((file.clone(), span.to_string()));
            }
        }
        // Quoted specs anywhere, code blocks included: 'peakewma&peakewma.choices=0,leastactive'.
        // Every quote may open one (prose apostrophes give candidates that do not match).
        for (at, _) in text.match_indices('\'') {
            let after = &text[at + 1..];
            let Some(quoted) = after.find('\'').map(|end| &after[..end]) else {
                continue;
            };
            for spec in quoted.split(',') {
                let Some((name, options)) = spec.split_once('&') else {
                    continue;
                };
                if is_strategy(name) && concrete_pairs(options) {
                    configs.push((file.clone(), format!("loadbalance={spec}")));
                }
            }
        }
    }
    configs
}

#[test]
fn every_config_string_in_the_docs_parses() {
    let configs = shown_configs();
    let mut failures = Vec::new();
    for (file, config) in &configs {
        // The simulator gives each consumer its own subset.key when a spec has none.
        let simulated = file.ends_with("simulator.md")
            && config.contains("subset.size=")
            && !config.contains("subset.key=")
            && !config.contains("subset.index=");
        let result = if simulated {
            Config::parse(&format!("{config}&subset.key=consumer-0"))
        } else {
            Config::parse(config)
        };
        if SHOWN_AS_ERRORS.contains(&config.as_str()) {
            match result {
                Err(e) if e.status == Status::InvalidConfig => {}
                other => failures.push(format!(
                    "{file}: `{config}` is shown as an error: {other:?}"
                )),
            }
        } else if let Err(e) = result {
            failures.push(format!("{file}: `{config}`: {}", e.message));
        }
    }
    for shown in SHOWN_AS_ERRORS {
        assert!(
            configs.iter().any(|(_, c)| c == shown),
            "`{shown}` is no longer in the docs: drop it from SHOWN_AS_ERRORS"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The recommended configuration, in README and docs/strategies.md, is among them.
    let recommended = "loadbalance=peakewma&peakewma.choices=0&peakewma.preferenceMs=1000";
    assert!(
        configs
            .iter()
            .any(|(f, c)| f == "README.md" && c == recommended),
        "README's recommended configuration was not found: is the extraction broken?"
    );
    assert!(
        configs.len() >= 10,
        "only {} config strings found",
        configs.len()
    );
}

fn known_keys() -> BTreeSet<&'static str> {
    Config::keys().map(|(k, _)| k).collect()
}

#[test]
fn every_config_key_named_in_the_docs_exists() {
    let keys = known_keys();
    // The families of dotted keys: `peakewma.…`, `outlier.…`, `hash.…`, …
    let families: BTreeSet<&str> = keys
        .iter()
        .filter_map(|k| k.split_once('.'))
        .map(|(f, _)| f)
        .collect();
    let mut unknown = Vec::new();
    let mut named = 0;
    for (file, text) in docs() {
        for span in code_spans(&text).into_iter().flat_map(|s| s.split('&')) {
            let key = span.split_once('=').map_or(span, |(k, _)| k);
            let Some((family, rest)) = key.split_once('.') else {
                continue;
            };
            // Keys are lower camel case after the dot (`orca.CallMetricsServerOption` is grpc-go's).
            let key_like = rest.starts_with(|c: char| c.is_ascii_lowercase())
                && rest.chars().all(|c| c.is_ascii_alphanumeric());
            if !families.contains(family) || !key_like || NOT_POLYLB_KEYS.contains(&key) {
                continue; // `outlier.*`, file names, Dubbo's own parameters
            }
            named += 1;
            if !keys.contains(key) {
                unknown.push(format!("{file}: `{span}`: no config key `{key}`"));
            }
        }
    }
    assert!(
        named >= 20,
        "only {named} key names found: is the extraction broken?"
    );
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
}

/// The first cells (backticked) of the rows of the first table after a heading.
fn table_names(file: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{file} has no heading '{heading}'"));
    text[start + heading.len() + 2..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| l[..l.find('`').unwrap()].to_string())
        .collect()
}

fn table_keys(file: &str, heading: &str) -> Vec<String> {
    table_names(file, heading)
        .into_iter()
        .filter(|k| !k.contains('*')) // `p2c.*`, … : "see docs/strategies.md"
        .collect()
}

#[test]
fn the_key_tables_list_exactly_the_librarys_keys() {
    let readme = table_keys("README.md", "### Configuration keys");
    let strategies = table_keys("docs/strategies.md", "## Configuration key rows");
    let listed: BTreeSet<&str> = readme
        .iter()
        .chain(&strategies)
        .map(String::as_str)
        .collect();
    let keys = known_keys();
    let missing: Vec<_> = keys.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&keys).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "README's and docs/strategies.md's key tables: missing {missing:?}, not keys {unknown:?}"
    );
    assert_eq!(
        readme.len() + strategies.len(),
        listed.len(),
        "a key listed twice"
    );
}

#[test]
fn readmes_strategy_table_lists_exactly_the_librarys_strategies() {
    let names = table_names("README.md", "## Strategies");
    let known: Vec<&str> = StrategyKind::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(names, known, "README's strategy table");
    let rows = table_names("docs/strategies.md", "## Strategy table rows");
    assert!(!rows.is_empty(), "docs/strategies.md has no strategy rows");
    for name in rows {
        assert!(
            is_strategy(&name),
            "docs/strategies.md's row `{name}` is no strategy"
        );
    }
}

/// The key and default cells (first two) of the rows of the first table after a heading.
fn table_defaults(file: &str, heading: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{file} has no heading '{heading}'"));
    text[start + heading.len() + 2..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').into(), cells[2].into())
        })
        .filter(|(key, _): &(String, String)| !key.contains('*'))
        .collect()
}

/// Pairs under which `key` is accepted (the options it needs, without `key` itself).
fn accepting(key: &str) -> String {
    let pairs: &[&str] = match key.split_once('.').map_or(key, |(family, _)| family) {
        "p2c" => &["loadbalance=p2c"],
        "peakewma" => &["loadbalance=peakewma"],
        "boundedhash" => &["loadbalance=boundedhash"],
        "maglev" => &["loadbalance=maglev"],
        "orca" => &["loadbalance=orca"],
        "zone" => &["zone=a", "outlier.consecutiveFailures=3"],
        // subset.size's default, 0, is subsetting off: alone, it is accepted.
        "subset" if key == "subset.size" => &[],
        // subset.index is the other way to choose than subset.key: never both.
        "subset" if key == "subset.index" => &["loadbalance=random", "subset.size=3"],
        "subset" => &[
            "loadbalance=p2c",
            "subset.size=3",
            "subset.key=a",
            "outlier.consecutiveFailures=3",
        ],
        "outlier" => &["outlier.consecutiveFailures=3", "outlier.failureRate=50"],
        "slowstart" => &["loadbalance=p2c", "slowstart.windowMs=1000"],
        _ => &[],
    };
    let pairs: Vec<&str> = pairs
        .iter()
        .copied()
        .filter(|p| !p.starts_with(&format!("{key}=")))
        .collect();
    pairs.join("&")
}

/// Each default the key tables give is the library's: the key set to it parses to the config
/// without it.
#[test]
fn the_key_tables_give_the_librarys_defaults() {
    let mut rows = table_defaults("README.md", "### Configuration keys");
    rows.extend(table_defaults(
        "docs/strategies.md",
        "## Configuration key rows",
    ));
    assert!(rows.len() >= 20, "only {} rows found", rows.len());
    let defaults = Config::default();
    let mut wrong = Vec::new();
    for (key, cell) in &rows {
        // `random`, `160`, `0 (off)`, `none`: the first word.
        let value = cell
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_matches('`');
        if value == "none" {
            let unset = match key.as_str() {
                "zone" => defaults.zone.is_none(),
                "seed" => defaults.seed.is_none(),
                "subset.key" => defaults.subset.key.is_none(),
                "subset.index" => defaults.subset.index.is_none(),
                _ => false,
            };
            if !unset {
                wrong.push(format!("`{key}`: the table says none"));
            }
            continue;
        }
        let base = accepting(key);
        let with = if base.is_empty() {
            format!("{key}={value}")
        } else {
            format!("{base}&{key}={value}")
        };
        match (Config::parse(&with), Config::parse(&base)) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(_), Ok(_)) => wrong.push(format!(
                "`{key}`: the table's default {cell} is not the library's ({with:?} changes it)"
            )),
            (a, b) => wrong.push(format!(
                "`{key}`: {with:?}: {:?}, {base:?}: {:?}",
                a.err(),
                b.err()
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
