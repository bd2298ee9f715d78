#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS (default 60), starting from the committed seed corpus.
#
#   fuzz/run.sh 30                  # CI: 30 s per target
#   fuzz/run.sh 3600 abi_sequence   # one target for an hour
#
# Works on stable Rust: libFuzzer (from the libfuzzer-sys crate, built with the C++ compiler)
# plus SanitizerCoverage, whose rustc flags (-Cpasses=sancov-module, -Cllvm-args=...) are
# stable. With a nightly toolchain installed (`cargo +nightly` works) it adds AddressSanitizer
# (-Zsanitizer=address); `cargo fuzz run <target>` works as well where cargo-fuzz is installed.
# Debug assertions and overflow checks are on, so an arithmetic overflow is a finding.
#
# New inputs go to fuzz/work/<target>/ (not committed); crashes to fuzz/artifacts/<target>/.
# To keep new coverage in the committed corpus:
#   target/x86_64-unknown-linux-gnu/release/<target> -merge=1 -use_counters=0 corpus/<target> work/<target>
# (from fuzz/; -use_counters=0: an input joins only for an edge the corpus does not reach)
# To replay one crash: fuzz/target/x86_64-unknown-linux-gnu/release/<target> <file>
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config abi_sequence abi_pair)

triple=x86_64-unknown-linux-gnu
flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
flags+=" -Cdebug-assertions -Coverflow-checks -Cforce-frame-pointers"
toolchain=()
if [ "${POLYLB_FUZZ_ASAN:-auto}" != 0 ] && cargo +nightly --version >/dev/null 2>&1; then
  toolchain=(+nightly)
  flags+=" -Zsanitizer=address"
  echo "fuzz: nightly found: AddressSanitizer on"
else
  echo "fuzz: stable toolchain: libFuzzer + coverage, no AddressSanitizer"
fi

RUSTFLAGS="$flags" cargo "${toolchain[@]}" build --release --target "$triple" \
  $(printf -- '--bin %s ' "${targets[@]}")

# The binaries are where cargo put them: CARGO_TARGET_DIR if set (relative to fuzz/, as cargo
# reads it from here), else fuzz/target.
bin="${CARGO_TARGET_DIR:-target}/$triple/release"
status=0
for t in "${targets[@]}"; do
  mkdir -p "work/$t" "artifacts/$t"
  echo "fuzz: $t for ${seconds}s"
  rc=0
  "$bin/$t" "work/$t" "corpus/$t" \
    -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"work/$t.log" 2>&1 || rc=$?
  grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|stat::number_of_executed_units|SUMMARY|ERROR|panicked" "work/$t.log" || true
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc); log: fuzz/work/$t.log; input in fuzz/artifacts/$t/"
    status=1
  fi
done
exit $status
