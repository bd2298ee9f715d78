//! Generates the C header with a pinned cbindgen into OUT_DIR. The checked-in
//! include/polylb.h must equal it (tests/header.rs); `POLYLB_WRITE_HEADER=1 cargo build`
//! refreshes the checked-in copy.

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
    header.write_to_file(format!("{out}/polylb.h"));
    if std::env::var_os("POLYLB_WRITE_HEADER").is_some() {
        header.write_to_file(format!("{dir}/include/polylb.h"));
    }
}
