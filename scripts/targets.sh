#!/usr/bin/env bash
# The libraries lint clean on the platforms users build them for besides this one: 64-bit ARM
# Linux (where C's `char` is unsigned), 32-bit x86 Linux (where `time_t` and `long` are 32 bits),
# macOS on Intel and Apple silicon, and Windows. The tests run only here, so code behind
# `cfg(unix)`, `cfg(target_arch)` or a `c_char` cast is otherwise never compiled for the other
# side: `cargo clippy` of polylb and polylb-jni (rlib, cdylib,
# staticlib) for each target, no linking, so no cross toolchain is needed; and the Go binding's
# macOS and Windows link lines against rustc's lists of system libraries.
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
  # cannot fetch them, and then the check cannot run (said, not failed). rustup has no timeout
  # of its own, so a route that drops packets is found out first, in seconds.
  server="${RUSTUP_DIST_SERVER:-https://static.rust-lang.org}"
  if command -v curl >/dev/null &&
    ! curl -fsS --max-time 20 -o /dev/null "$server/dist/channel-rust-stable.toml.sha256"; then
    echo "targets: skipped: $server does not answer, so rustup cannot add ${missing[*]}"
    exit 0
  fi
  if ! timeout 300 rustup target add "${missing[@]}"; then
    echo "targets: skipped: could not add ${missing[*]} with rustup (no route to its server?)"
    exit 0
  fi
fi
for t in "${targets[@]}"; do
  CARGO_TARGET_DIR=target/targets cargo clippy --quiet --release --locked -p polylb -p polylb-jni \
    --lib --target "$t" -- -D warnings
  echo "targets: polylb and polylb-jni lint clean for $t"
done

# The Go binding's macOS and Windows link lines (`#cgo darwin LDFLAGS` and `#cgo windows
# LDFLAGS` in polylb.go, in its benchmark's nativebench.go and in its README) name rustc's
# native-static-libs for those targets (Windows: the GNU one, as cgo links with MinGW's gcc); no
# Mac or Windows machine runs the tests, so compare the lists here.
out=target/targets/native-static-libs.txt
pairs=(x86_64-apple-darwin:darwin aarch64-apple-darwin:darwin)
# Building the Windows static library makes import libraries (raw-dylib, in parking_lot_core's
# windows-link) with MinGW's dlltool; .ci/run installs it.
if command -v x86_64-w64-mingw32-dlltool >/dev/null; then
  pairs+=(x86_64-pc-windows-gnu:windows)
else
  echo "targets: the Go binding's Windows link line skipped: no x86_64-w64-mingw32-dlltool" \
    "(Debian: binutils-mingw-w64-x86-64)"
fi
for pair in "${pairs[@]}"; do
  t=${pair%%:*} goos=${pair##*:}
  if ! CARGO_TARGET_DIR=target/targets cargo rustc --quiet --release --locked -p polylb --lib \
    --crate-type staticlib --target "$t" -- --print native-static-libs >"$out" 2>&1; then
    cat "$out" >&2
    exit 1
  fi
  libs=$(sed -n 's/.*native-static-libs: //p' "$out")
  for file in bindings/go/polylb.go bindings/go/internal/nativebench/nativebench.go \
    bindings/go/README.md; do
    go_libs=$(sed -n "s/^#cgo $goos LDFLAGS: [^ ]*libpolylb\\.a //p" "$file")
    if [ "$libs" != "$go_libs" ]; then
      echo "targets: rustc links $t with '$libs', $file's $goos line says '$go_libs'" >&2
      exit 1
    fi
  done
done
echo "targets: the Go binding's link lines are rustc's lists for ${pairs[*]%%:*}"
