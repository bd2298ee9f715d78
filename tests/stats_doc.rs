//! docs/abi-contract.md's stats table is what `stats_json` writes: every field it lists is
//! written, every field written is listed, and a field listed for some strategies only (the
//! table's "in rows of" column naming them) appears for exactly those. Each strategy runs with
//! every option that adds fields (zone, both outlier rules, slow start where it applies), and
//! `adaptive` gets provider metrics.

use polylb::{Balancer, Invoker, Outcome, StrategyKind};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// One row of the table: its field names, whether they are `methods[]` fields, and the
/// strategies the row is limited to (None: every strategy, or rows that depend on options only).
struct Row {
    fields: Vec<String>,
    per_method: bool,
    strategies: Option<BTreeSet<&'static str>>,
}

/// The backticked spans of a table cell.
fn spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

fn doc() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join("docs/abi-contract.md")).unwrap()
}

/// The rows of the first table after "## The stats snapshot", and the method fields every
/// strategy writes (the quoted names in the `methods` row).
fn table() -> (Vec<Row>, BTreeSet<String>) {
    let text = doc();
    let section = &text[text
        .find("## The stats snapshot")
        .expect("docs/abi-contract.md has a stats section")..];
    let mut rows = Vec::new();
    let mut base_method_fields = BTreeSet::new();
    for line in section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (names, rows_of, meaning) = (cells[1], cells[2], cells[3]);
        let names = spans(names);
        let per_method = names[0].starts_with("methods[].");
        let fields: Vec<String> = names
            .iter()
            .map(|n| n.trim_start_matches("methods[].").to_string())
            .collect();
        if fields == ["methods"] {
            base_method_fields = meaning
                .split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
        }
        let named: BTreeSet<&str> = spans(rows_of)
            .into_iter()
            .filter_map(StrategyKind::from_name)
            .map(StrategyKind::name)
            .collect();
        let strategies =
            (!rows_of.starts_with("every strategy") && !named.is_empty()).then_some(named);
        rows.push(Row {
            fields,
            per_method,
            strategies,
        });
    }
    assert!(rows.len() > 10, "the stats table was not found");
    assert!(
        base_method_fields.contains("method"),
        "the `methods` row names its fields"
    );
    (rows, base_method_fields)
}

/// The config that makes `kind` write every field it can.
fn config(kind: StrategyKind) -> String {
    let mut config = format!(
        "loadbalance={}&seed=7&zone=a&outlier.consecutiveFailures=3&outlier.failureRate=50",
        kind.name()
    );
    if kind.has_slow_start() {
        config += "&slowstart.windowMs=60000";
    }
    if kind.takes_subset() {
        // Both invokers: the subset changes no pick here.
        config += "&subset.size=2&subset.key=k";
    }
    config
}

/// The invoker fields and the method fields `kind` writes, over a few calls on two invokers.
fn written(kind: StrategyKind) -> (BTreeSet<String>, BTreeSet<String>) {
    let lb = Balancer::new(&config(kind)).unwrap();
    let now = 1_700_000_000_000_000;
    lb.update(&[
        Invoker::new(1, "10.0.0.1:20880").zone("a"),
        Invoker::new(2, "10.0.0.2:20880").zone("b"),
    ])
    .unwrap();
    let method = lb.method("sayHello").unwrap();
    for i in 0..40 {
        let id = lb
            .select(method, format!("key-{i}").as_bytes(), now + i)
            .unwrap();
        lb.report(method, id, 900, Outcome::Success, now + i)
            .unwrap();
        lb.report_provider_metrics(method, id, 1_700_000_000_000 + i, 0.5, 900, now + i)
            .unwrap();
    }
    let stats: Value = serde_json::from_str(&lb.stats_json(now + 40)).unwrap();
    let top: BTreeSet<&str> = stats.as_object().unwrap().keys().map(|k| &**k).collect();
    assert_eq!(top, BTreeSet::from(["invokers", "strategy"]), "{kind:?}");
    let (mut invoker_fields, mut method_fields) = (BTreeSet::new(), BTreeSet::new());
    for invoker in stats["invokers"].as_array().unwrap() {
        invoker_fields.extend(invoker.as_object().unwrap().keys().cloned());
        for row in invoker["methods"].as_array().unwrap() {
            method_fields.extend(row.as_object().unwrap().keys().cloned());
        }
    }
    assert!(!method_fields.is_empty(), "{kind:?}: no method rows");
    (invoker_fields, method_fields)
}

#[test]
fn the_stats_table_lists_exactly_the_fields_written() {
    let (rows, base_method_fields) = table();
    assert!(
        doc().contains(r#"`{"strategy": name, "invokers": [...]}`"#),
        "the top-level object is described"
    );
    let written: BTreeMap<&str, _> = StrategyKind::ALL
        .iter()
        .map(|&kind| (kind.name(), written(kind)))
        .collect();
    let mut problems = Vec::new();
    let (mut all_invoker, mut all_method) = (BTreeSet::new(), BTreeSet::new());
    for (invoker_fields, method_fields) in written.values() {
        all_invoker.extend(invoker_fields.iter().cloned());
        all_method.extend(method_fields.iter().cloned());
    }
    let mut listed_invoker = BTreeSet::new();
    let mut listed_method = base_method_fields.clone();
    for row in &rows {
        for field in &row.fields {
            if row.per_method {
                listed_method.insert(field.clone());
            } else {
                listed_invoker.insert(field.clone());
            }
            let Some(only) = &row.strategies else {
                continue;
            };
            for (kind, (invoker_fields, method_fields)) in &written {
                let fields = if row.per_method {
                    method_fields
                } else {
                    invoker_fields
                };
                if fields.contains(field) != only.contains(kind) {
                    problems.push(format!(
                        "`{field}`: listed for {only:?}, written: {} for {kind}",
                        fields.contains(field)
                    ));
                }
            }
        }
    }
    for (kind, (_, method_fields)) in &written {
        for field in base_method_fields.difference(method_fields) {
            problems.push(format!("methods[].{field} not written for {kind}"));
        }
    }
    for (what, listed, all) in [
        ("invoker", &listed_invoker, &all_invoker),
        ("method", &listed_method, &all_method),
    ] {
        for field in all.difference(listed) {
            problems.push(format!("{what} field `{field}` is written but not listed"));
        }
        for field in listed.difference(all) {
            problems.push(format!(
                "{what} field `{field}` is listed but never written"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
