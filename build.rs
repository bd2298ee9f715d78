//! Generates the C header with a pinned cbindgen into OUT_DIR. The checked-in
//! include/polylb.h must equal it (tests/header.rs); `POLYLB_WRITE_HEADER=1 cargo build`
//! refreshes the checked-in copy.
//!
//! On Linux it also names the shared library's SONAME: the full version before 1.0
//! (research/ffi-style.md), so that a program linked against one release never loads another.

fn main() {
    println!("cargo:rerun-if-changed=src/ffi.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=POLYLB_WRITE_HEADER");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml parses");
    let header = cbindgen::Builder::new()
        .with_src(format!("{dir}/src/ffi.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut text = Vec::new();
    header.write(&mut text);
    let text = c89_comments(&String::from_utf8(text).expect("cbindgen writes UTF-8"));
    std::fs::write(format!("{out}/polylb.h"), &text).expect("OUT_DIR is writable");
    if std::env::var_os("POLYLB_WRITE_HEADER").is_some() {
        std::fs::write(format!("{dir}/include/polylb.h"), &text).expect("include/ is writable");
    }
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        name_the_soname(&out);
    }
}

/// cbindgen's C++ guards end in `//` comments, which C89 has not: a C89 compiler (or C99's
/// `-std=c89 -pedantic-errors`) refuses the header for them alone.
fn c89_comments(header: &str) -> String {
    header
        .lines()
        .map(|line| match line.split_once("//") {
            Some((code, comment)) if line.starts_with('#') || line.starts_with('}') => {
                format!("{code}/* {} */", comment.trim())
            }
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Links libpolylb.so with SONAME libpolylb.so.<version>, and puts a link of that name beside
/// the library in the profile's output directories: a program linked with `-L<dir> -lpolylb`
/// (the C example, tests/c_abi.rs) asks the loader for the SONAME, so the build directory must
/// answer to it as an installed library directory would.
fn name_the_soname(out_dir: &str) {
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let soname = format!("libpolylb.so.{version}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    // OUT_DIR is <profile>/build/polylb-<hash>/out; cargo links into <profile>/deps and copies
    // to <profile>. The links dangle until the library is linked, which is fine for a loader.
    let Some(profile) = std::path::Path::new(out_dir).ancestors().nth(3) else {
        return;
    };
    for dir in [profile.to_path_buf(), profile.join("deps")] {
        let link = dir.join(&soname);
        if std::fs::read_link(&link).is_ok_and(|target| target.as_os_str() == "libpolylb.so") {
            continue;
        }
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::create_dir_all(&dir);
        #[cfg(unix)]
        if let Err(e) = std::os::unix::fs::symlink("libpolylb.so", &link) {
            println!(
                "cargo:warning=could not link {} to libpolylb.so: {e}",
                link.display()
            );
        }
    }
}
