#!/usr/bin/env bash
# Runs the tests that race threads under ThreadSanitizer (nightly, with the standard library
# and every dependency rebuilt instrumented by -Zbuild-std, which needs the rust-src component):
# the library's unit tests, tests/stress_abi.rs, tests/concurrency.rs, tests/call.rs,
# tests/round_robin.rs, tests/strategies.rs and tests/beyond_dubbo's concurrency tests, then
# the C and C++ programs of tests/c (threads, fork, thread exit) against the static library.
# Exits non-zero on any report that scripts/tsan.supp does not suppress, or on a failed test.
# About 6 min to build (std included) and 10 min to run on the shared 2-core VM (see
# docs/reliability.md). Not part of test-all.sh or CI: those machines may lack nightly or
# rust-src.
#   rustup toolchain install nightly && rustup +nightly component add rust-src
# The reports go to $CARGO_TARGET_DIR/tsan-logs/<test>.log (target dir: $POLYLB_TSAN_TARGET_DIR,
# else $CARGO_TARGET_DIR/tsan, else target/tsan: apart from the ordinary builds, which it
# would otherwise rebuild).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

step() { printf '\n==== %s\n' "$*"; }

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "tsan.sh: no nightly toolchain (rustup toolchain install nightly)" >&2
  exit 2
fi
if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep '^rust-src' >/dev/null; then
  step "installing rust-src for nightly (-Zbuild-std needs it)"
  if ! rustup +nightly component add rust-src; then
    echo "tsan.sh: could not install rust-src for nightly, which -Zbuild-std needs to build" >&2
    echo "  the standard library with ThreadSanitizer. Without it TSan cannot see std's" >&2
    echo "  synchronisation (Once, Arc's fences) and reports races that are not; no run." >&2
    exit 2
  fi
fi

host=$(rustc +nightly -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR="${POLYLB_TSAN_TARGET_DIR:-${CARGO_TARGET_DIR:-target}/tsan}"
export RUSTFLAGS="-Zsanitizer=thread"
# The release profile's fat LTO and single codegen unit make the tests no more instrumented,
# only the build slower.
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
export TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 report_signal_unsafe=0 suppressions=$root/scripts/tsan.supp"
logs="$CARGO_TARGET_DIR/tsan-logs"
mkdir -p "$logs"

# Test targets, each with the filter its binary runs with ("" = every test).
targets=(
  "lib:"
  "stress_abi:"
  "concurrency:"
  "call:"
  "round_robin:"
  "strategies:"
  "beyond_dubbo:concurrency:: orca::concurrent"
)
cargo_args=(+nightly test -Zbuild-std --release --target "$host")
for t in "${targets[@]}"; do
  name=${t%%:*}
  if [ "$name" = lib ]; then cargo_args+=(--lib); else cargo_args+=(--test "$name"); fi
done

step "building the tests, std and the dependencies with -Zsanitizer=thread (into $CARGO_TARGET_DIR)"
cargo "${cargo_args[@]}" --no-run --message-format=json-render-diagnostics >"$logs/build.json"
# "name executable" per test target; the library's unit tests are named "lib".
executables=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        t = m["target"]
        print("lib" if "test" not in t["kind"] else t["name"], m["executable"])
' "$logs/build.json")

failed=0
total=0
for t in "${targets[@]}"; do
  name=${t%%:*}
  filter=${t#*:}
  exe=$(printf '%s\n' "$executables" | awk -v n="$name" '$1 == n { print $2 }')
  if [ -z "$exe" ]; then
    echo "tsan.sh: no test executable for $name" >&2
    exit 2
  fi
  # A binary without TSan's calls would pass silently.
  if ! nm "$exe" | grep ' __tsan_func_entry$' >/dev/null; then
    echo "tsan.sh: $exe is not instrumented by ThreadSanitizer" >&2
    exit 2
  fi
  step "tsan: $name${filter:+ ($filter)}"
  start=$(date +%s)
  rc=0
  # shellcheck disable=SC2086 # an empty filter is no argument
  "$exe" $filter >"$logs/$name.log" 2>&1 || rc=$?
  reports=$(grep -c '^WARNING: ThreadSanitizer' "$logs/$name.log" || true)
  suppressed=$(sed -n 's/^ThreadSanitizer: Matched \([0-9]*\) suppressions.*/\1/p' "$logs/$name.log")
  grep -E '^test result' "$logs/$name.log" || true
  echo "$name: $reports report(s), exit $rc, $(($(date +%s) - start)) s; log: $logs/$name.log${suppressed:+ ($suppressed suppressed)}"
  total=$((total + reports))
  if [ "$rc" -ne 0 ] || [ "$reports" -ne 0 ]; then failed=1; fi
done

# The C and C++ programs of tests/c (threads, fork with threads, calls from thread exit, the
# C++ wrapper) against the static library built the same way: compiled with GCC's
# -fsanitize=thread, linked with rustc's own TSan runtime (the one the library's instrumentation
# was built for; GCC's lacks some of its entry points). die_after_fork=0: test_fork_threads'
# children start threads after forking a threaded parent, which TSan allows with it.
step "building the static library with -Zsanitizer=thread"
cargo +nightly build -Zbuild-std --release --target "$host" --lib
runtime="$(rustc +nightly --print sysroot)/lib/rustlib/$host/lib/librustc-nightly_rt.tsan.a"
if [ ! -f "$runtime" ]; then
  echo "tsan.sh: no TSan runtime at $runtime" >&2
  exit 2
fi
if ! command -v gcc >/dev/null; then
  echo "tsan.sh: no gcc, which the C programs of tests/c need" >&2
  exit 2
fi
cdir="$CARGO_TARGET_DIR/tsan-c"
mkdir -p "$cdir"
for src in tests/c/*.c tests/c/*.cpp; do
  prog=$(basename "${src%.*}")
  if [[ $src == *.cpp ]] && ! command -v g++ >/dev/null; then
    echo "tsan.sh: no g++: $src not run"
    continue
  fi
  case $src in
    *.cpp) cc=(g++ -std=c++17) ;;
    *) cc=(gcc -std=c11) ;;
  esac
  step "tsan: $src"
  "${cc[@]}" -Wall -Wextra -O1 -g -fsanitize=thread -pthread -Iinclude -Itests/c -c "$src" \
    -o "$cdir/$prog.o"
  "${cc[@]}" -pthread "$cdir/$prog.o" "$CARGO_TARGET_DIR/$host/release/libpolylb.a" \
    -Wl,--whole-archive "$runtime" -Wl,--no-whole-archive -ldl -lm -lrt -lgcc_s -o "$cdir/$prog"
  if ! nm "$cdir/$prog" | grep ' __tsan_func_entry$' >/dev/null; then
    echo "tsan.sh: $cdir/$prog is not instrumented by ThreadSanitizer" >&2
    exit 2
  fi
  start=$(date +%s)
  rc=0
  TSAN_OPTIONS="$TSAN_OPTIONS die_after_fork=0" "$cdir/$prog" >"$logs/$prog.log" 2>&1 || rc=$?
  reports=$(grep -c '^WARNING: ThreadSanitizer' "$logs/$prog.log" || true)
  echo "$prog: $reports report(s), exit $rc, $(($(date +%s) - start)) s; log: $logs/$prog.log"
  total=$((total + reports))
  if [ "$rc" -ne 0 ] || [ "$reports" -ne 0 ]; then failed=1; fi
done

if [ "$failed" -ne 0 ]; then
  step "tsan: FAILED ($total unsuppressed report(s); see the logs above)"
  exit 1
fi
step "tsan: no reports"
