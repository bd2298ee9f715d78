#!/usr/bin/env bash
# polylb beside the floors and the peers each language's users would pick, in one run, on the
# same invoker sets; writes BENCHMARKS.md at the repository root.
#
#   bash bench/run.sh            # the full suite (about 10-15 minutes on 2 cores)
#   bash bench/run.sh --smoke    # tiny iteration counts: only checks that the command works;
#                                # writes target/bench-peers-smoke/, never BENCHMARKS.md
#
# Suites (each writes JSON lines to target/bench-peers/<suite>.jsonl; bench/report.py joins them):
#   rust    bench/rust-peers: pingora-load-balancing 0.9.1 and tower 0.5 PeakEwma (crates.io)
#   go      bench/go-peers: apache/dubbo-go v3.3.1 cluster/loadbalance (Go module proxy)
#   java    bindings/java/polylb-benchmarks (JMH): Dubbo 3.3's own LoadBalance classes
#   python  bench/python_peers.py: pure-Python balancers doing the same work per call
# Each suite also times its binding's call object against the same work by hand (n = 10).
# SUITES="rust go" bash bench/run.sh runs a subset (the report keeps the other suites' last
# results if their files exist). OUT=path overrides BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SMOKE=0
[[ "${1:-}" == "--smoke" ]] && SMOKE=1
SUITES=${SUITES:-"rust go java python"}
if [[ $SMOKE == 1 ]]; then  # a smoke run never overwrites the real results
    OUTDIR=$ROOT/target/bench-peers-smoke
    OUT=${OUT:-$OUTDIR/BENCHMARKS.md}
else
    OUTDIR=$ROOT/target/bench-peers
    OUT=${OUT:-$ROOT/BENCHMARKS.md}
fi
mkdir -p "$OUTDIR"
START=$(date +%s)

log() { echo "[bench $(($(date +%s) - START))s] $*" >&2; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# suite metadata line: load average at the start and end of the suite, duration
meta() { # suite start_load start_time
    printf '{"suite":"%s","kind":"meta","load_start":"%s","load_end":"%s","seconds":%d,"smoke":%d}\n' \
        "$1" "$2" "$(loadavg)" $(($(date +%s) - $3)) "$SMOKE" >> "$OUTDIR/$1.jsonl"
}

# what the host says it is: VMs of one name can differ (a slow spell and a slower host look alike)
{
    lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1
    # one model name covers several generations (AMD family 25 is Zen 3 at model 1, Zen 4 at 17)
    awk -F': ' '/^cpu family/ {f = $2} /^model[[:space:]]*:/ {m = $2} END {if (f != "") print "family " f " model " m}' /proc/cpuinfo 2>/dev/null
    grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo "AVX-512"
    echo "$(nproc) vCPU"
    # its clock and width now (bench/host_probe.c; x86-64 with a C compiler only)
    if [[ $(uname -m) == x86_64 ]] && cc -O2 -o "$OUTDIR/host_probe" bench/host_probe.c 2>/dev/null; then
        "$OUTDIR/host_probe"
    fi
    lscpu 2>/dev/null | sed -n 's/^Hypervisor vendor:[[:space:]]*//p' | head -1
    lscpu 2>/dev/null | sed -n 's/^BogoMIPS:[[:space:]]*/BogoMIPS /p' | head -1
} | paste -sd';' - | sed 's/;/; /g' > "$OUTDIR/machine.txt" || true

FAILED=""
log "building libpolylb (release)"
rm -f "$OUTDIR/stale-libs"
if ! cargo build --release -q -p polylb -p polylb-jni >&2; then
    log "WARNING: cargo build failed; the Go, Java and Python suites use the libraries already in target/release"
    # the report names the commit it measured: say that these suites did not measure it
    echo "cargo build --release failed: the Go, Java and Python suites measured whatever libraries an earlier build left in target/release, not this commit" \
        > "$OUTDIR/stale-libs"
    FAILED=" build"
fi
run_suite() {
    local suite=$1 t0 l0
    t0=$(date +%s)
    l0=$(loadavg)
    case $suite in
    rust)
        log "rust: building bench/rust-peers (pingora, tower)"
        profile=release
        [[ $SMOKE == 1 ]] && profile=smoke
        (cd bench/rust-peers && CARGO_TARGET_DIR=$ROOT/bench/rust-peers/target cargo build --profile "$profile" -q >&2)
        bin=$ROOT/bench/rust-peers/target/$profile/polylb-rust-peers
        log "rust: running (load $l0)"
        # 3 processes (the report takes each row's median over them); the smoke run: 1, tiny
        : > "$OUTDIR/rust.jsonl"
        if [[ $SMOKE == 1 ]]; then
            "$bin" --smoke >> "$OUTDIR/rust.jsonl"
        else
            for _ in 1 2 3; do
                "$bin" >> "$OUTDIR/rust.jsonl"
            done
        fi
        ;;
    go)
        log "go: bench/go-peers (dubbo-go v3.3.1 vs the polylb cgo binding) (load $l0)"
        bt=200ms
        [[ $SMOKE == 1 ]] && bt=20x
        # as the other suites: a failed run must not leave the last run's rows in the report
        : > "$OUTDIR/go.jsonl"
        # Three processes, as the Rust suite: the report takes each row's median, so that one
        # disturbed sample (a row is one 200-ms sample per process) does not make the table.
        runs=3
        [[ $SMOKE == 1 ]] && runs=1
        : > "$OUTDIR/go.txt"
        for _ in $(seq "$runs"); do
            (cd bench/go-peers && go test -run '^$' -bench . -cpu 1,2 -benchtime "$bt" -timeout 20m) \
                >> "$OUTDIR/go.txt"
        done
        python3 bench/report.py parse-go "$OUTDIR/go.txt" > "$OUTDIR/go.jsonl"
        ;;
    java)
        log "java: JMH, Dubbo's LoadBalance vs the polylb adapter (load $l0)"
        jar=bindings/java/polylb-benchmarks/target/benchmarks.jar
        # Always repackage: the jar carries its own copy of libpolylb_jni.so, and a jar left from
        # an earlier build would measure that build's native code (cheap when nothing changed).
        (cd bindings/java && mvn -B -q -Pbench install -DskipTests -Dpolylb.cargo.skip=true >&2)
        # the packed library must be the one cargo just built
        if ! python3 - "$jar" target/release/libpolylb_jni.so <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as jar:
    packed = [jar.read(n) for n in jar.namelist() if n.endswith("/libpolylb_jni.so")]
built = open(sys.argv[2], "rb").read()
sys.exit(0 if built in packed else 1)
PY
        then
            log "java: $jar does not carry target/release/libpolylb_jni.so"
            return 1
        fi
        if [[ $SMOKE == 1 ]]; then
            # JMH allows one instance per machine (/tmp/jmh.lock); the smoke run only checks that
            # the command works, so it runs even beside someone else's JMH run
            jvm=(-Djmh.ignoreLock=true)
            jmh=(-wi 1 -w 100ms -i 1 -r 200ms -f 1)
            # every path of the full run, at the smallest n: each strategy's adapter and Dubbo
            # class, 2 threads, and the merge of repeated rounds
            dubbo=(-p strategy=random,roundrobin,leastactive,shortestresponse,consistenthash,adaptive)
            runs=("1 10" "2 10")
            rounds=2
        else
            # one JVM fork per parameter set (monomorphic call sites); 2 threads at n=100 only,
            # to keep the suite's ~61 forks within about 6 minutes
            jvm=()
            jmh=(-wi 2 -w 500ms -i 3 -r 500ms -f 1)
            dubbo=(-p strategy=random,roundrobin,leastactive,shortestresponse,consistenthash,adaptive)
            runs=("1 10,100,1000" "2 100")
            rounds=3
        fi
        : > "$OUTDIR/java.jsonl"
        for run in "${runs[@]}"; do
            read -r t sizes <<< "$run"
            # The floor and polylb in turn, $rounds times: the machine has slow spells of
            # seconds that slow the native path more than the floor's few instructions, and a
            # ratio of two measurements taken at different moments would carry them.
            rm -f "$OUTDIR"/jmh-balancer-t"$t"-r*.json
            for round in $(seq 1 "$rounds"); do
                java "${jvm[@]}" -jar "$jar" 'BalancerBench.(javaFloorWeightedPick|polylbRandomSelectReport|polylbConsistentHashSelectReport)$' \
                    "${jmh[@]}" -p n="$sizes" -t "$t" -rf json -rff "$OUTDIR/jmh-balancer-t$t-r$round.json" \
                    -jvmArgsAppend "-Dpolylb.library.path=$ROOT/target/release/libpolylb_jni.so" >&2
            done
            java "${jvm[@]}" -jar "$jar" 'DubboSelectBench' "${jmh[@]}" -p n="$sizes" "${dubbo[@]}" -t "$t" \
                -rf json -rff "$OUTDIR/jmh-dubbo-t$t.json" \
                -jvmArgsAppend "-Dpolylb.library.path=$ROOT/target/release/libpolylb_jni.so" >&2
            python3 bench/report.py parse-jmh "$OUTDIR"/jmh-balancer-t"$t"-r*.json "$OUTDIR/jmh-dubbo-t$t.json" \
                >> "$OUTDIR/java.jsonl"
        done
        # Balancer.Call against the same select, two nanoTime reads and report by hand (n = 10)
        rm -f "$OUTDIR"/jmh-call-r*.json
        for round in $(seq 1 "$rounds"); do
            java "${jvm[@]}" -jar "$jar" 'BalancerBench.(polylbRandomSelectTimedReport|polylbRandomCallFinish)$' \
                "${jmh[@]}" -p n=10 -t 1 -rf json -rff "$OUTDIR/jmh-call-r$round.json" \
                -jvmArgsAppend "-Dpolylb.library.path=$ROOT/target/release/libpolylb_jni.so" >&2
        done
        python3 bench/report.py parse-jmh "$OUTDIR"/jmh-call-r*.json >> "$OUTDIR/java.jsonl"
        ;;
    python)
        log "python: bench/python_peers.py (binding vs pure-Python balancers) (load $l0)"
        args=()
        [[ $SMOKE == 1 ]] && args+=(--smoke)
        python3 bench/python_peers.py "${args[@]}" > "$OUTDIR/python.jsonl"
        ;;
    *) echo "unknown suite $suite" >&2; return 2 ;;
    esac
    meta "$suite" "$l0" "$t0"
    log "$suite done in $(($(date +%s) - t0)) s"
}
for suite in $SUITES; do
    # a failing suite (say, JMH refusing to start beside another JMH run) does not stop the others
    # (not inside `if`: bash ignores set -e in a tested command, even in a subshell)
    set +e
    (set -e; run_suite "$suite")
    rc=$?
    set -e
    if [[ $rc != 0 ]]; then
        log "FAILED: $suite (exit $rc)"
        FAILED="$FAILED $suite"
    fi
done

python3 bench/report.py write "$OUTDIR" "$OUT" "$SMOKE" "$(($(date +%s) - START))"
log "wrote $OUT in $(($(date +%s) - START)) s"
if [[ -n $FAILED ]]; then
    log "suites that failed:$FAILED"
    exit 1
fi
