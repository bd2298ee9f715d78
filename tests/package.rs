//! The crate `cargo package` makes builds and tests on its own: no test it carries includes a
//! file it lacks (`#[path = ...]`, as fuzz/targets.rs, which the fuzz package keeps), and none
//! needs a git checkout around it (an unpacked .crate has none).

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn packaged_files() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(cargo)
        .args([
            "package",
            "--list",
            "--allow-dirty",
            "--offline",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo package --list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `dir/../x` as `x`, as a path in the package listing.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    parts.join("/")
}

#[test]
fn packaged_tests_need_only_packaged_files_and_no_git() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = packaged_files();
    assert!(files.contains("src/lib.rs") && files.contains("build.rs"));
    let mut faults = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.starts_with("tests/") && f.ends_with(".rs"))
    {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let dir = PathBuf::from(file).parent().unwrap().to_path_buf();
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("#[path = \"") {
                let target = normalize(&dir.join(rest.split('"').next().unwrap()));
                if !files.contains(&target) {
                    faults.push(format!("{file} includes {target}, which the crate lacks"));
                }
            }
            if line.contains("Command::new(\"git\")") {
                faults.push(format!(
                    "{file} runs git, which an unpacked crate is not in"
                ));
            }
        }
    }
    assert!(faults.is_empty(), "{faults:#?}");
}
