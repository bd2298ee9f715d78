#!/usr/bin/env python3
"""bench/run.sh's helper: turns each suite's output into JSON lines, then writes BENCHMARKS.md.

    report.py parse-go go.txt                      go test -bench output -> JSON lines
    report.py parse-jmh a.json [b.json ...]        JMH -rf json -> JSON lines
    report.py parse-python N bench-output.txt      bindings/python/bench.py table -> JSON lines
    report.py write DIR OUT.md SMOKE SECONDS       DIR/*.jsonl -> BENCHMARKS.md

A JSON line: {"suite","kind","impl","name","n","threads","value","unit"}; kind is select (ns per
operation), call (ns per call through a call object, impl call-object, or the same work by hand,
impl by-hand), update (µs per rebuild), memory (bytes) or meta (load average, duration).
"""
import json
import pathlib
import re
import statistics
import sys
import time


def line(suite, kind, impl, name, n, threads, value, unit="ns"):
    print(json.dumps(dict(suite=suite, kind=kind, impl=impl, name=name, n=n, threads=threads,
                          value=round(value, 3), unit=unit)))


def parse_go(path):
    impls = {"Floor": "floor", "Polylb": "polylb", "DubboGo": "dubbo-go"}
    for text in open(path):
        m = re.match(r"Benchmark(\w+)/(\S+?)(?:-(\d+))?\s+\d+\s+([\d.]+) ns/op", text)
        if not m:
            continue
        group, rest, cpu, ns = m.groups()
        parts = rest.split("/")
        n = 0
        if parts[-1].startswith("n="):
            n = int(parts.pop()[2:])
        if group == "Call":  # Call/<strategy>/<call-object|by-hand>
            line("go", "call", parts[1], parts[0], n, int(cpu or 1), float(ns))
            continue
        line("go", "select", impls.get(group, group), "/".join(parts), n, int(cpu or 1), float(ns))


JAVA_CALL_ROWS = {"polylbRandomCallFinish": "call-object", "polylbRandomSelectTimedReport": "by-hand"}


def parse_jmh(paths):
    """One line per benchmark and parameter set: the median of every measured iteration, over
    every fork and every file (runs repeated in turn, so that a slow spell of the machine
    weighs on each side of a ratio alike)."""
    merged = {}
    for path in paths:
        p = pathlib.Path(path)
        if not p.exists():
            continue
        for e in json.loads(p.read_text() or "[]"):
            key = (e["benchmark"], tuple(sorted(e.get("params", {}).items())), e["threads"])
            raw = [v for fork in e["primaryMetric"]["rawData"] for v in fork]
            if key in merged:
                merged[key][1].extend(raw)
            else:
                merged[key] = (e, raw)
    for e, raw in merged.values():
        cls, bench = e["benchmark"].rsplit(".", 2)[-2:]
        # JMH's AverageTime is the time per operation seen by each thread (averaged over the
        # threads), not wall time over all threads' operations as the other suites report on 2
        # threads: divide by the thread count (JMH keeps the threads' iterations synchronised).
        med = statistics.median(raw) / e["threads"]
        params = e.get("params", {})
        n = int(params.get("n", 0))
        if bench in JAVA_CALL_ROWS:
            line("java", "call", JAVA_CALL_ROWS[bench], "random", n, e["threads"], med)
        elif cls == "BalancerBench":
            impl = "floor" if bench.startswith("javaFloor") else "polylb"
            line("java", "select", impl, bench, n, e["threads"], med)
        else:
            line("java", "select", params["impl"] if params["impl"] != "dubbo" else "dubbo",
                 params["strategy"], n, e["threads"], med)


PY_ROWS = {
    "floor: ctypes select32+report32, no argtypes, NULL handle": ("floor", "ctypes-select+report"),
    "binding: lb.select() + lb.report() (random)": ("polylb", "random"),
    "binding: roundrobin": ("polylb", "roundrobin"),
    "binding: leastactive": ("polylb", "leastactive"),
    "binding: consistenthash, str key": ("polylb", "consistenthash"),
    "binding: lb.select() alone": ("polylb", "random select alone"),
    "floor: ctypes select32 alone, NULL handle": ("floor", "ctypes-select"),
    "pure Python: bisect weighted pick": ("pure-python", "bisect weighted pick"),
}


def parse_python(n, path):
    seen = set()
    for text in open(path):
        m = re.match(r"\| (.+?) \| ([\d.]+) \|", text)
        if m and m.group(1) in PY_ROWS:
            seen.add(m.group(1))
            impl, name = PY_ROWS[m.group(1)]
            line("python", "select", impl, name, int(n), 1, float(m.group(2)))
    # bench.py's row labels are matched verbatim: a renamed row (its floors were, once) would
    # otherwise drop out of the report without a word
    missing = [label for label in PY_ROWS if label not in seen]
    if missing:
        sys.exit(f"report.py parse-python: rows not in {path}: {missing}")


# ------------------------------------------------------------------ report

def load(d):
    rows, meta = {}, {}
    for f in sorted(pathlib.Path(d).glob("*.jsonl")):
        for text in f.read_text().splitlines():
            if not text.strip():
                continue
            r = json.loads(text)
            if r["kind"] == "meta":
                meta[r["suite"]] = r
            else:  # a row measured in several processes: the median of them
                rows.setdefault((r["suite"], r["kind"], r["impl"], r["name"], r["n"], r["threads"]),
                                []).append(r["value"])
    return {k: statistics.median(v) for k, v in rows.items()}, meta


def fmt(v):
    if v is None:
        return "–"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def ratio(a, b):
    return f"{a / b:.2f}×" if a is not None and b else "–"


def speedup(peer, ours):
    if peer is None or not ours:
        return "–"
    s = peer / ours
    return f"**{s:.1f}×**" if s >= 1 else f"**{s:.2f}×** (behind)"


# (polylb strategy, floor name, floor n or None for same n, peer impl, peer name, note)
COMPARE = {
    "rust": [
        ("random", "weighted", None, "pingora", "Weighted<fnv>", ""),
        ("random", "weighted", None, "pingora", "Weighted<Random>", ""),
        ("roundrobin", "swrr_loop", None, "pingora", "RoundRobin", "pingora: not smooth (w consecutive picks)"),
        ("consistenthash", "md5_ring", None, "pingora", "Ketama", "pingora: CRC32, polylb: Dubbo's MD5"),
        ("maglev", "hash_table", None, "pingora", "Ketama", "pingora: CRC32 ring, polylb: Maglev table"),
        ("orca", "stride", None, "pingora", "RoundRobin", "polylb: A58 weighted round robin, by the configured weights here (no load reports); pingora: not smooth"),
        ("peakewma", "p2c", None, "tower", "PeakEwma", "tower: private endpoints per thread"),
        ("p2c", "p2c", None, "tower", "PeakEwma", ""),
        ("leastactive", "leastactive_scan", None, "tower", "PeakEwma", "Dubbo least active is O(n)"),
        ("adaptive", "adaptive_pair", None, None, None, "Dubbo's AdaptiveLoadBalance, every provider's metrics in"),
    ],
    "go": [
        (s, "cgo-2calls", 0, "dubbo-go", s, "") for s in
        ["random", "roundrobin", "leastactive", "consistenthash", "p2c"]
    ],
    "java": [
        ("polylbRandomSelectReport", "javaFloorWeightedPick", None, None, None, "io.polylb.Balancer"),
        ("polylbConsistentHashSelectReport", "javaFloorWeightedPick", None, None, None, "io.polylb.Balancer"),
    ] + [
        (s, "javaFloorWeightedPick", None, "dubbo", s, "LoadBalance.select (adapter pays select+report)")
        for s in ["random", "roundrobin", "leastactive", "shortestresponse", "consistenthash", "adaptive"]
    ],
    "python": [
        (s, "ctypes-select+report", None, "pure-python", s, "") for s in
        ["random", "roundrobin", "leastactive", "consistenthash"]
    ],
}

TITLES = {
    "rust": "Rust: polylb (in-process) vs pingora-load-balancing 0.9.1 and tower 0.5.3 PeakEwma",
    "go": "Go: polylb cgo binding vs apache/dubbo-go v3.3.1 cluster/loadbalance",
    "java": "Java: polylb (JNI) vs Dubbo 3.3's own LoadBalance classes (JMH)",
    "python": "Python: polylb ctypes binding vs a pure-Python pick",
}
POLYLB_IMPL = {"rust": "polylb", "go": "polylb", "java": "polylb", "python": "polylb"}


def table(rows, suite, out):
    sizes = sorted({k[4] for k in rows if k[0] == suite and k[1] == "select" and k[4]})
    threads = sorted({k[5] for k in rows if k[0] == suite and k[1] == "select"})
    for t in threads:
        out.append(f"\n#### {t} thread{'s' if t > 1 else ''}\n")
        out.append("| polylb | n | polylb ns/op | floor | floor ns/op | polylb × floor | peer | peer ns/op | "
                   "peer × floor | polylb speed-up over peer |")
        out.append("|---|---:|---:|---|---:|---:|---|---:|---:|---:|")
        for ours, fl, fl_n, peer_impl, peer, note in COMPARE[suite]:
            for n in sizes:
                v = rows.get((suite, "select", "polylb", ours, n, t))
                if v is None:
                    continue
                f = rows.get((suite, "select", "floor", fl, n if fl_n is None else fl_n, t))
                fl_label = fl
                if f is None and t != 1:  # e.g. the O(n) smooth-WRR floor is timed on 1 thread only
                    f = rows.get((suite, "select", "floor", fl, n if fl_n is None else fl_n, 1))
                    if f is not None:  # not a 2-thread wall time: say so beside the number
                        fl_label = f"{fl} (1 thread)"
                p = rows.get((suite, "select", peer_impl, peer, n, t)) if peer_impl else None
                label = f"{peer_impl} {peer}" if peer_impl else "no peer"
                if note:
                    label += f" ({note})"
                out.append(f"| {ours} | {n} | {fmt(v)} | {fl_label} | {fmt(f)} | {ratio(v, f)} | {label} | "
                           f"{fmt(p)} | {ratio(p, f)} | {speedup(p, v)} |")
        extra = sorted({k[3] for k in rows if k[0] == suite and k[1] == "select" and k[2] == "floor"
                        and k[5] == t})
        if extra:
            cells = []
            for name in extra:
                vals = [f"n={n}: {fmt(rows[(suite, 'select', 'floor', name, n, t)])}"
                        for n in [0] + sizes if (suite, "select", "floor", name, n, t) in rows]
                cells.append(f"{name} ({', '.join(vals)})")
            out.append(f"\nFloors in this run, ns/op: " + "; ".join(cells) + ".")


CALL_OBJECTS = {
    "rust": "`Balancer::call` + `finish`",
    "go": "`lb.Call` + `Finish`",
    "java": "`Balancer.Call` (try-with-resources) + `finish`",
    "python": "`with lb.call() as call: call.id`",
}


def call_table(rows, suite, out):
    calls = sorted({(k[3], k[4]) for k in rows if k[0] == suite and k[1] == "call" and k[5] == 1})
    if not calls:
        return
    out.append(f"\n#### The call object, 1 thread: {CALL_OBJECTS[suite]} against select, two clock reads "
               "and report written out (ns/op, same run)\n")
    out.append("| strategy | n | call object | by hand | call object ÷ by hand |")
    out.append("|---|---:|---:|---:|---:|")
    for name, n in calls:
        ours = rows.get((suite, "call", "call-object", name, n, 1))
        hand = rows.get((suite, "call", "by-hand", name, n, 1))
        out.append(f"| {name} | {n} | {fmt(ours)} | {fmt(hand)} | {ratio(ours, hand)} |")


def write(d, path, smoke, seconds):
    rows, meta = load(d)
    out = ["# BENCHMARKS: polylb beside its floors and the peers each language's users would pick", ""]
    import subprocess
    try:
        here = pathlib.Path(__file__).parent
        rev = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True,
                             cwd=here).stdout.strip()
        # The report itself is rewritten by every run: only other changes make the code dirty.
        changed = subprocess.run(["git", "status", "--porcelain", "--", ":/", ":!/BENCHMARKS.md"],
                                 capture_output=True, text=True, cwd=here).stdout.strip()
        if changed:
            rev += "-dirty"
    except OSError:
        rev = "?"
    total = sum(m.get("seconds", 0) for m in meta.values())
    out.append(f"Generated by `bash bench/run.sh{' --smoke' if smoke == '1' else ''}` on "
               f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; the suites took {total} s "
               f"(this invocation {seconds} s, builds included), polylb at `{rev}`"
               + (" (`-dirty`: uncommitted changes in the working tree were measured)" if rev.endswith("-dirty") else "")
               + ". "
               "The machine is a 2-vCPU VM shared with other jobs: absolute ns move by ±20–50 % (much more "
               "under load); **read the ratios**, each taken against a floor or a peer measured in the same "
               "run (same process for Rust; same `go test` / JMH / timeit run for the others).")
    machine = pathlib.Path(d) / "machine.txt"
    if machine.exists() and machine.read_text().strip():
        out[-1] += f" Host: {machine.read_text().strip()}."
    stale = pathlib.Path(d) / "stale-libs"
    if stale.exists():
        out.append(f"\n**WARNING: {stale.read_text().strip()}.**")
    if smoke == "1":
        out.append("\n**SMOKE RUN: tiny iteration counts; these numbers only show that the command works.**")
    out.append("")
    intro = pathlib.Path(__file__).with_name("BENCHMARKS.intro.md")
    if intro.exists():
        out.append(intro.read_text())
    notes = pathlib.Path(__file__).with_name("BENCHMARKS.notes.md")
    if notes.exists() and smoke != "1":
        out.append(notes.read_text())
    out.append("\n# The tables")
    for suite in ["rust", "go", "java", "python"]:
        if not any(k[0] == suite for k in rows):
            continue
        m = meta.get(suite, {})
        out.append(f"\n## {TITLES[suite]}\n")
        if m:
            out.append(f"Load average (1/5/15 min) at start: {m.get('load_start')}; at end: {m.get('load_end')}; "
                       f"suite took {m.get('seconds')} s.")
        table(rows, suite, out)
        upd = {k: v for k, v in rows.items() if k[0] == suite and k[1] == "update"}
        if upd:
            out.append("\n#### Update (rebuild) at n = 1000, membership changing on every update (µs, median)\n")
            out.append("\"With the next calls\": the update and the 50,000 select+report calls after it, less as many "
                       "calls on a set that did not change (what an update leaves to the calls: roundrobin serves "
                       "them from a slower path until its counters are back on a period).\n")
            out.append("| impl | selector | µs per update | polylb ÷ pingora (same kind) "
                       "| µs with the next calls | polylb ÷ pingora |")
            out.append("|---|---|---:|---:|---:|---:|")
            same = {"consistenthash": "Ketama", "maglev": "Ketama", "random": "Weighted<fnv>",
                    "roundrobin": "RoundRobin", "leastactive": "Weighted<fnv>"}

            def update_ratio(kind, k, v):
                if k[2] != "polylb" or v is None:
                    return ""
                peer = rows.get((suite, kind, "pingora", same.get(k[3], ""), 1000, 1))
                return f"{v / peer:.2f}× (vs {same[k[3]]})" if peer else ""

            for k, v in sorted(upd.items(), key=lambda kv: (kv[0][2] != "polylb", kv[0][3])):
                after = rows.get((suite, "update_after") + k[2:])
                out.append(f"| {k[2]} | {k[3]} | {fmt(v)} | {update_ratio('update', k, v)} "
                           f"| {fmt(after) if after is not None else '–'} | {update_ratio('update_after', k, after)} |")
        call_table(rows, suite, out)
        mem = {k: v for k, v in rows.items() if k[0] == suite and k[1] == "memory"}
        if mem:
            out.append("\n#### Memory (counting global allocator, n = 1000; live bytes per invoker after the update — "
                       "pingora's after 4 selects as well, tower's after building its endpoints; "
                       "polylb's \"+1000 methods\" rows: what 4 select+report calls on each of 1000 methods add, "
                       "over all 1000 invokers though each method reaches only 4; \"+10 methods, every invoker "
                       "called\": what a method in use costs per invoker)\n")
            out.append("| impl | selector | bytes per invoker |")
            out.append("|---|---|---:|")
            for k, v in sorted(mem.items(), key=lambda kv: (kv[0][2] != "polylb", kv[0][3])):
                unit = " per method" if "methods" in k[3] else ""
                out.append(f"| {k[2]} | {k[3]} | {v:,.1f}{unit} |")
    pathlib.Path(path).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "parse-go":
        parse_go(sys.argv[2])
    elif cmd == "parse-jmh":
        parse_jmh(sys.argv[2:])
    elif cmd == "parse-python":
        parse_python(sys.argv[2], sys.argv[3])
    elif cmd == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
