#!/usr/bin/env bash
# The oldest Rust that builds the libraries (Cargo.toml's `rust-version`), checked with the
# committed Cargo.lock: `cargo check` of the crate (rlib, cdylib, staticlib, build script with
# cbindgen) and of the JNI crate. Tests, benchmarks and examples need a newer stable (the
# dev-dependency proptest 1.12 needs Rust 1.88), so they are not part of this check.
#
#   bash scripts/msrv.sh      # installs the toolchain with rustup (minimal profile) if missing;
#                             # skipped, with a line saying so, where rustup cannot install it
set -euo pipefail
cd "$(dirname "$0")/.."

msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
jni_msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' bindings/java/native/Cargo.toml)
if [ "$msrv" != "$jni_msrv" ]; then
  echo "msrv: Cargo.toml says $msrv, bindings/java/native/Cargo.toml says $jni_msrv" >&2
  exit 1
fi
if ! command -v rustup >/dev/null; then
  echo "msrv: skipped: no rustup to install Rust $msrv with"
  exit 0
fi
if ! rustup toolchain list | grep -q "^$msrv"; then
  # rustup's download server is not a package registry: a machine that reaches only registries
  # cannot fetch it, and then the check cannot run (said, not failed). rustup has no timeout of
  # its own, so a route that drops packets is found out first, in seconds.
  server="${RUSTUP_DIST_SERVER:-https://static.rust-lang.org}"
  if command -v curl >/dev/null &&
    ! curl -fsS --max-time 20 -o /dev/null "$server/dist/channel-rust-stable.toml.sha256"; then
    echo "msrv: skipped: $server does not answer, so rustup cannot install Rust $msrv"
    exit 0
  fi
  if ! timeout 600 rustup toolchain install "$msrv" --profile minimal; then
    echo "msrv: skipped: could not install Rust $msrv with rustup (no route to its server?)"
    exit 0
  fi
fi
CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check --locked -p polylb -p polylb-jni
echo "msrv: polylb and polylb-jni build with Rust $msrv"
