//! The README's C quick start compiles against the built library and runs cleanly.

use std::path::PathBuf;
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
    let lib = root.join("target/release/libpolylb.a");
    if !lib.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "--release", "--lib"])
            .current_dir(&root)
            .status()
            .unwrap();
        assert!(ok.success());
    }
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
