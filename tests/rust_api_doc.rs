//! docs/rust-api.md's block, "the signatures on one page", is the crate's API: every `pub fn` and
//! `pub const` it shows exists in src/ with the same parameter and return types, and every type
//! it shows with its derives, fields or variants has exactly those in src/. A signature changed
//! in the code without the page (or a typo on the page) fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text with `//` and `/* */` comments removed (neither the page nor src/ puts `//` in a
/// string that matters here).
fn strip_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("/*") {
        out += &rest[..at];
        rest = &rest[at + rest[at..].find("*/").expect("closed comment") + 2..];
    }
    out += rest;
    out.lines()
        .map(|l| l.find("//").map_or(l, |at| &l[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits at commas outside brackets.
fn top_level(text: &str, separator: char) -> Vec<String> {
    let (mut parts, mut depth, mut current) = (Vec::new(), 0i32, String::new());
    for c in text.chars() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' if !current.ends_with('-') => depth -= 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if c == separator && depth == 0 {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|p| squeeze(&p))
        .filter(|p| !p.is_empty())
        .collect()
}

/// `name(types) -> return` of a `pub fn` whose text (after `pub fn `) is `decl`: parameter names
/// and `mut` dropped, so `weight(mut self, weight: i32)` and `weight(self, w: i32)` agree.
fn signature(decl: &str) -> String {
    let open = decl.find('(').expect("a parameter list");
    let close = open + {
        let mut depth = 0;
        decl[open..]
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .expect("closed parameter list")
            .0
    };
    let params: Vec<String> = top_level(&decl[open + 1..close], ',')
        .into_iter()
        .map(|p| match p.split_once(':') {
            Some((_, ty)) if !p.starts_with("&self") => squeeze(ty),
            _ => p.replace("mut ", ""),
        })
        .collect();
    let ret = squeeze(decl[close + 1..].trim());
    format!("{}({}) {}", squeeze(&decl[..open]), params.join(", "), ret)
        .trim()
        .to_string()
}

/// Every `pub fn` of a text, as `signature`s; `end` closes a declaration (`;` on the page, the
/// body's `{` or a `where` in src/).
fn functions(text: &str, ends: &[&str]) -> Vec<String> {
    text.match_indices("pub fn ")
        .map(|(at, _)| {
            let decl = &text[at + "pub fn ".len()..];
            let end = ends
                .iter()
                .filter_map(|e| decl.find(e))
                .min()
                .expect("declaration end");
            signature(&decl[..end])
        })
        .collect()
}

fn consts(text: &str) -> Vec<String> {
    text.match_indices("pub const ")
        .map(|(at, _)| {
            let decl = &text[at..];
            squeeze(&decl[..decl.find([';', '=']).unwrap()])
        })
        .collect()
}

/// For each `pub struct` / `pub enum`: its name, the derives of the attributes right before it
/// and its body (the items between braces, squeezed; None for `pub struct Name;`).
type Types = BTreeMap<String, (BTreeSet<String>, Option<Vec<String>>)>;

fn types(text: &str) -> Types {
    let mut found = Types::new();
    for keyword in ["pub struct ", "pub enum "] {
        for (at, _) in text.match_indices(keyword) {
            let mut derives = BTreeSet::new();
            let mut before = text[..at].trim_end();
            while before.ends_with(']') {
                let open = before.rfind("#[").unwrap();
                if let Some(list) = before[open..].strip_prefix("#[derive(") {
                    derives.extend(
                        list.trim_end_matches(")]")
                            .split(',')
                            .map(|d| d.trim().to_string()),
                    );
                }
                before = before[..open].trim_end();
            }
            let item = &text[at + keyword.len()..];
            let name_end = item
                .find(|c: char| !c.is_alphanumeric() && c != '_')
                .unwrap();
            let after = item[name_end..].trim_start();
            let body = after.strip_prefix('{').map(|b| {
                top_level(&b[..b.find('}').unwrap()], ',')
                    .into_iter()
                    .filter(|i| !i.starts_with("#["))
                    .collect()
            });
            found.insert(item[..name_end].to_string(), (derives, body));
        }
    }
    found
}

fn source_text() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                *out += &strip_comments(&std::fs::read_to_string(&path).unwrap());
                out.push('\n');
            }
        }
    }
    let mut out = String::new();
    walk(&root().join("src"), &mut out);
    out
}

fn page_block() -> String {
    let page = std::fs::read_to_string(root().join("docs/rust-api.md")).unwrap();
    let start = page
        .find("```rust\n")
        .expect("docs/rust-api.md has a rust block")
        + 8;
    strip_comments(&page[start..start + page[start..].find("```").unwrap()])
}

#[test]
fn rust_api_page_shows_the_crates_signatures() {
    let page = page_block();
    let source = source_text();
    let mut wrong = Vec::new();

    let known: BTreeSet<String> = functions(&source, &["{", " where", ";"])
        .into_iter()
        .collect();
    let shown = functions(&page, &[";"]);
    assert!(
        shown.len() >= 20,
        "only {} functions on the page",
        shown.len()
    );
    for f in &shown {
        if !known.contains(f) {
            let name = &f[..f.find('(').unwrap()];
            let near: Vec<_> = known.iter().filter(|k| k.starts_with(name)).collect();
            wrong.push(format!("fn {f}: not in src/ (same name: {near:?})"));
        }
    }

    let known_consts: BTreeSet<String> = consts(&source).into_iter().collect();
    for c in consts(&page) {
        if !known_consts.contains(&c) {
            wrong.push(format!("{c}: not in src/"));
        }
    }

    let source_types = types(&source);
    let page_types = types(&page);
    assert!(page_types.len() >= 6, "only {page_types:?} on the page");
    for (name, (derives, body)) in &page_types {
        let Some((src_derives, src_body)) = source_types.get(name) else {
            wrong.push(format!("type {name}: not in src/"));
            continue;
        };
        if derives != src_derives {
            wrong.push(format!(
                "type {name}: derives {derives:?} on the page, {src_derives:?} in src/"
            ));
        }
        // Bodies the page shows: in full, except Config's first fields only (`/* every key,
        // as fields */`); `pub struct Balancer;` hides its private one.
        if let (Some(body), Some(src_body)) = (body, src_body) {
            let shown_whole = body == src_body;
            let abridged = name == "Config" && src_body.starts_with(body);
            if !(shown_whole || abridged) {
                wrong.push(format!(
                    "type {name}: {body:?} on the page, {src_body:?} in src/"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "docs/rust-api.md:\n{}", wrong.join("\n"));
}
