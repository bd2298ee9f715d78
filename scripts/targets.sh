#!/usr/bin/env bash
# The libraries lint clean on the platforms users build them for besides this one: 64-bit ARM
# Linux (where C's `char` is unsigned), 32-bit x86 Linux (where `time_t` and `long` are 32 bits),
# macOS on Intel and Apple silicon, and Windows. The tests run only here, so code behind
# `cfg(unix)`, `cfg(target_arch)` or a `c_char` cast is otherwise never compiled for the other
# side: `cargo clippy` of polylb and polylb-jni (rlib, cdylib,
# staticlib) for each target, no linking, so no cross toolchain is needed; and the Go binding's
# macOS link line against rustc's list of system libraries.
#
#   bash scripts/targets.sh   # adds the targets' standard libraries with rustup if missing;
#                             # skipped, with a line saying so, where rustup cannot add them
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(aarch64-unknown-linux-gnu i686-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin
  x86_64-pc-windows-gnu)

if ! command -v rustup >/dev/null; then
  echo "targets: skipped: no rustup to add the targets' standard libraries with"
  exit 0
fi
installed=$(rustup target list --installed)
missing=()
for t in "${targets[@]}"; do
  grep -qx "$t" <<<"$installed" || missing+=("$t")
done
if [ ${#missing[@]} -gt 0 ]; then
  # rustup's download server is not a package registry: a machine that reaches only registries
  # cannot fetch them, and then the check cannot run (said, not failed)
  if ! timeout 600 rustup target add "${missing[@]}"; then
    echo "targets: skipped: could not add ${missing[*]} with rustup (no route to its server?)"
    exit 0
  fi
fi
for t in "${targets[@]}"; do
  CARGO_TARGET_DIR=target/targets cargo clippy --quiet --release --locked -p polylb -p polylb-jni \
    --lib --target "$t" -- -D warnings
  echo "targets: polylb and polylb-jni lint clean for $t"
done

# The Go binding's macOS link line (bindings/go/polylb.go, `#cgo darwin LDFLAGS`) names rustc's
# native-static-libs for Apple targets; no Mac runs its tests, so compare the list here.
for t in x86_64-apple-darwin aarch64-apple-darwin; do
  libs=$(CARGO_TARGET_DIR=target/targets cargo rustc --quiet --release --locked -p polylb --lib \
    --crate-type staticlib --target "$t" -- --print native-static-libs 2>&1 |
    sed -n 's/.*native-static-libs: //p')
  go_libs=$(sed -n 's/^#cgo darwin LDFLAGS: [^ ]*libpolylb\.a //p' bindings/go/polylb.go)
  if [ "$libs" != "$go_libs" ]; then
    echo "targets: rustc links $t with '$libs', bindings/go/polylb.go's darwin line says '$go_libs'" >&2
    exit 1
  fi
done
echo "targets: the Go binding's macOS link line is rustc's list"
