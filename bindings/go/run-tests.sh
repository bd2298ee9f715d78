#!/bin/sh
# Tests of the Go binding: builds the Rust static library if it is missing or
# older than its sources, then gofmt, go vet, go test -race (pointer checks
# on), the same tests under the strict cgocheck2 checker, a short
# benchmark smoke run, the grpc-go policy's tests (polylbgrpc/) and the
# dubbo-go adapter's (polylbdubbo/). Exits
# non-zero on the first failure.
#
# Usage: bindings/go/run-tests.sh        (from anywhere; needs go, gcc, cargo)
# POLYLB_VECTORS=/path/to/vectors.json adds a vector file (or directory).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
lib="$root/target/release/libpolylb.a"

step() { printf '\n== %s\n' "$*"; }

# The cgo directives name $lib by path; a cargo build into another CARGO_TARGET_DIR would leave
# it missing or stale and the tests would link that.
if [ -n "${CARGO_TARGET_DIR:-}" ] &&
	[ "$(cd "$root" && realpath -m "$CARGO_TARGET_DIR")" != "$(realpath -m "$root/target")" ]; then
	echo "run-tests.sh: CARGO_TARGET_DIR=$CARGO_TARGET_DIR, but the binding links $lib:" \
		"unset CARGO_TARGET_DIR, or make $root/target a link to it" >&2
	exit 1
fi

if [ ! -f "$lib" ] || [ ! -f "$root/include/polylb.h" ] ||
	[ -n "$(find "$root/src" "$root/Cargo.toml" "$root/build.rs" -newer "$lib" 2>/dev/null | head -n 1)" ]; then
	step "cargo build --release (libpolylb.a missing or stale)"
	(cd "$root" && cargo build --release)
fi

cd "$here"
export CGO_ENABLED=1

step "gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "not gofmt'd: $unformatted" >&2
	exit 1
fi

step "go vet"
go vet ./...

# cgocheck=1 is Go's default; set it anyway so a GODEBUG in the environment
# cannot switch the pointer checks off.
step "go test -race (GODEBUG=cgocheck=1)"
GODEBUG=cgocheck=1 go test -race -count=1 ./...

# The strict checker also traps Go pointers stored into C memory (what
# Update's C-allocated invoker array must never hold). It rebuilds the
# standard library once, so it runs without -race to save time.
if GOEXPERIMENT=cgocheck2 go env GOEXPERIMENT >/dev/null 2>&1; then
	step "go test (GOEXPERIMENT=cgocheck2)"
	GOEXPERIMENT=cgocheck2 go test -count=1 ./...
else
	step "GOEXPERIMENT=cgocheck2 not supported by $(go version): skipped"
fi

step "benchmark smoke run"
go test -run '^$' -bench . -benchtime=1000x ./...

# The grpc-go policy is a module of its own (it depends on grpc-go, fetched
# from the module proxy on first use); gofmt above covered it.
step "polylbgrpc: go vet, go test -race"
(cd polylbgrpc && go vet ./... && GODEBUG=cgocheck=1 go test -race -count=1 ./...)

# The dubbo-go LoadBalance adapter, a module of its own too (dubbo-go v3.3.1
# and its dependencies from the module cache or the proxy). Its end-to-end
# test starts Triple providers as child processes on loopback.
step "polylbdubbo: go vet, go test -race"
(cd polylbdubbo && go vet ./... && GODEBUG=cgocheck=1 go test -race -count=1 ./...)

step "ok"
