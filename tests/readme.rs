//! The README's C quick start compiles against the built library and runs cleanly.

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn readme_c_quick_start_runs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme.find("```c\n").expect("README has a C block") + 5;
    let code = &readme[start..start + readme[start..].find("```").unwrap()];
    let dir = std::env::temp_dir().join(format!("polylb-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("quick.c"), code).unwrap();
    let lib = static_library(&root);
    let exe = dir.join("quick");
    let out = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(dir.join("quick.c"))
        .arg(format!("-I{}", root.join("include").display()))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(
        run.status.success(),
        "quick start failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        run.stderr.is_empty(),
        "quick start printed an error: {}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// libpolylb.a of this build: `cargo test` compiles it into target/<profile>/deps (only `cargo
/// build` copies it up a level), the profile directory being the parent of the deps/ this test
/// runs from, so a CARGO_TARGET_DIR or another profile is followed and a stale copy in
/// ./target/release is never linked. Built with `cargo build --lib` only when neither has it.
fn static_library(root: &Path) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .filter(|dir| dir.join("deps").is_dir())
        .map_or_else(|| root.join("target/release"), Path::to_path_buf);
    let found = || {
        [profile.join("deps"), profile.clone()]
            .into_iter()
            .map(|dir| dir.join("libpolylb.a"))
            .find(|lib| lib.is_file())
    };
    if let Some(lib) = found() {
        return lib;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--lib", "--manifest-path"])
        .arg(root.join("Cargo.toml"));
    if let Some(target_dir) = profile.parent() {
        cmd.arg("--target-dir").arg(target_dir);
    }
    match profile.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(name) => {
            cmd.args(["--profile", name]);
        }
        None => panic!("no profile directory in {}", profile.display()),
    }
    assert!(cmd.status().unwrap().success(), "cargo build --lib failed");
    found().unwrap_or_else(|| panic!("no libpolylb.a under {}", profile.display()))
}
