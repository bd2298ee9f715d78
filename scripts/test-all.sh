#!/usr/bin/env bash
# Every test of the project: the docs' links, Rust (core, C ABI from C, header), the tower
# integration, Python, Go, Java, plus smoke runs of the benchmarks and the simulator so their
# commands keep working.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==== %s\n' "$*"; }

step "docs: every relative link and anchor leads somewhere"
python3 scripts/check-doc-links.py

step "rust: format, lints and the API docs"
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
# The Rust API's docs: a broken or private intra-doc link fails here, not on a reader.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p polylb

step "rust: build the libraries (.so, .a) and the header"
cargo build --release

step "rust: the libraries build with the oldest supported Rust (Cargo.toml's rust-version)"
bash scripts/msrv.sh

step "rust: the libraries lint clean for ARM Linux, 32-bit Linux, macOS and Windows too"
bash scripts/targets.sh

step "rust: tests (core, Dubbo vectors, C ABI from C, header)"
cargo test --release
step "rust: the fuzz corpus again with overflow checks (debug build): no arithmetic overflows"
cargo test --test fuzz_corpus
step "rust: extreme numbers and times with overflow checks (debug build)"
cargo test --test extremes

step "benchmarks: smoke (each benchmark runs once)"
cargo bench --bench select -- --test >/dev/null
if [ -f benches/beyond.rs ]; then cargo bench --bench beyond -- --test >/dev/null; fi

step "tower integration (integrations/tower, a package of its own)"
cargo fmt --manifest-path integrations/tower/Cargo.toml -- --check
cargo clippy --release --manifest-path integrations/tower/Cargo.toml --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --manifest-path integrations/tower/Cargo.toml
cargo test --release --manifest-path integrations/tower/Cargo.toml
cargo run --release --manifest-path integrations/tower/Cargo.toml --example bench -- 1000 >/dev/null

step "python binding"
bash bindings/python/run-tests.sh

step "go binding"
bash bindings/go/run-tests.sh

step "java binding and Dubbo adapter"
bash bindings/java/run-tests.sh

step "all tests passed"
