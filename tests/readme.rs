//! The README's C quick start compiles against the built library, linked by the README's own
//! static link line, and runs cleanly; every static link line the docs show names the system
//! libraries of examples/c/Makefile.

mod common;
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
    let lib = static_library();
    let exe = dir.join("quick");
    let out = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(dir.join("quick.c"))
        .arg(format!("-I{}", root.join("include").display()))
        .arg(&lib)
        .args(static_libs_after_archive(&readme, "# static"))
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

/// The words after `libpolylb.a` on the first line of `text` that contains `marker` (a shell
/// comment after them left out).
fn static_libs_after_archive<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .find(|l| l.contains(marker) && l.contains("libpolylb.a"))
        .unwrap_or_else(|| panic!("no static link line marked {marker:?}"));
    let line = &line[line.find("libpolylb.a").unwrap() + "libpolylb.a".len()..];
    let line = line.split('#').next().unwrap();
    line.split_whitespace().collect()
}

/// The static link lines of the README, examples/c/README.md and the Go binding's cgo directives
/// (and their copy in its README) add the libraries examples/c/Makefile keeps in
/// NATIVE_STATIC_LIBS (which tests/c_abi.rs links with and `make check-native-static-libs`
/// compares with rustc's answer), so a change of that list reaches every one of them.
#[test]
fn static_link_lines_name_the_makefiles_libraries() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap();
    let makefile = read("examples/c/Makefile");
    let list: Vec<&str> = makefile
        .lines()
        .find_map(|l| l.strip_prefix("NATIVE_STATIC_LIBS ?="))
        .expect("NATIVE_STATIC_LIBS in examples/c/Makefile")
        .split_whitespace()
        .collect();
    for (file, marker) in [
        ("README.md", "# static"),
        (
            "examples/c/README.md",
            "cc -std=c11 app.c -I include target/release/libpolylb.a",
        ),
        ("bindings/go/README.md", "#cgo linux LDFLAGS:"),
        ("bindings/go/polylb.go", "#cgo linux LDFLAGS:"),
        (
            "bindings/go/internal/nativebench/nativebench.go",
            "#cgo linux LDFLAGS:",
        ),
    ] {
        let text = read(file);
        assert_eq!(
            static_libs_after_archive(&text, marker),
            list,
            "{file}: the libraries after libpolylb.a"
        );
    }
}

/// libpolylb.a of this build: `cargo test` compiles it into target/<profile>/deps (only `cargo
/// build` copies it up a level), the profile directory being the parent of the deps/ this test
/// runs from, so a CARGO_TARGET_DIR or another profile is followed and a stale copy in
/// ./target/release is never linked. Built with `cargo build --lib` only when neither has it.
fn static_library() -> PathBuf {
    let profile = common::built::profile_dir();
    let found = || {
        [profile.join("deps"), profile.clone()]
            .into_iter()
            .map(|dir| dir.join("libpolylb.a"))
            .find(|lib| lib.is_file())
    };
    if let Some(lib) = found() {
        return lib;
    }
    common::built::cargo_build_lib(&profile);
    found().unwrap_or_else(|| panic!("no libpolylb.a under {}", profile.display()))
}
