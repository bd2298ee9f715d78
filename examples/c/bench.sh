#!/bin/sh
# The cost of the C ABI: times plb_select + plb_report from C (bench.c, linked with the static
# and with the shared library) and the same calls through the Rust API (ffi_overhead.rs), on
# the same build, and prints ns per select + report pair and the ratio C/Rust.
#
# The three programs run back to back, ROUNDS times in turn (default 3), so that a slow
# moment of the machine hits all of them; each case keeps its best median over the rounds.
#
# Usage: examples/c/bench.sh   (from anywhere; builds what it needs in release mode)
set -eu
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}

cargo build --release --lib --example ffi_overhead >&2
# Where that build went: CARGO_TARGET_DIR if set (relative to this directory, as cargo reads
# it), so that the C programs link the library just built, never a stale ./target.
release=$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)
make -s -C examples/c bench LINK=static LIBDIR="$release" >&2
make -s -C examples/c bench LINK=shared LIBDIR="$release" >&2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
while [ "$i" -lt "$rounds" ]; do
    "$release/examples/ffi_overhead" >> "$tmp/rust" 2>/dev/null
    examples/c/build/static/bench >> "$tmp/static" 2>/dev/null
    examples/c/build/shared/bench >> "$tmp/shared" 2>/dev/null
    i=$((i + 1))
done

# Lines are "<strategy> <n> <median> <min>"; keep the best median per "<strategy> <n>".
awk -v rounds="$rounds" '
    function keep(table, key, v) { if (!(key in table) || v < table[key]) table[key] = v }
    { key = $1 " " $2 }
    FILENAME ~ /rust$/   { if (!(key in rust)) order[++k] = key; keep(rust, key, $3) }
    FILENAME ~ /static$/ { keep(cs, key, $3) }
    FILENAME ~ /shared$/ { keep(cd, key, $3) }
    END {
        printf "%-12s %4s %9s %9s %7s %9s %7s\n", "strategy", "n", "Rust ns", "C(.a) ns",
               "C/Rust", "C(.so) ns", "C/Rust"
        for (i = 1; i <= k; i++) {
            key = order[i]; split(key, f, " ")
            printf "%-12s %4s %9.2f %9.2f %6.2fx %9.2f %6.2fx\n", f[1], f[2], rust[key],
                   cs[key], cs[key] / rust[key], cd[key], cd[key] / rust[key]
        }
        printf "ns per select+report pair: best of %d rounds of (median of 9 x 1e6 pairs)\n", rounds
        print "goal: C/Rust <= 1.3x"
    }' "$tmp/rust" "$tmp/static" "$tmp/shared"
