//! Where this test build's libraries are, and how to build them when they are not there: for
//! the tests that compile and link C programs against libpolylb.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// target/<profile> of this build: the parent of the deps/ directory this test runs from (so
/// CARGO_TARGET_DIR and `cargo test` without --release work too).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    match exe.parent().and_then(Path::parent) {
        Some(dir) if dir.join("deps").is_dir() => dir.to_path_buf(),
        _ => root().join("target/release"),
    }
}

/// `cargo build --lib` for the profile whose output directory is `profile`.
pub fn cargo_build_lib(profile: &Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--lib", "-p", "polylb", "--manifest-path"])
        .arg(root().join("Cargo.toml"));
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
    let out = cmd.output().expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build --lib failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
