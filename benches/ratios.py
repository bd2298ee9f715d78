#!/usr/bin/env python3
"""Reads criterion's estimates from target/criterion and prints each strategy's select+report
time beside the floor it is judged against, measured in the same run, as a ratio."""
import json, pathlib, sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")

def ns(group, name, n):
    f = root / group / name / str(n) / "new" / "estimates.json"
    if not f.exists():
        return None
    return json.loads(f.read_text())["median"]["point_estimate"]

# Each strategy's own floor (the bare pick it is judged against), and the P2C floor: the same
# kind of pick plus the in-flight accounting every select+report must do (two atomic RMWs).
FLOOR = {"random": "weighted", "leastactive": "uniform", "adaptive": "adaptive_pair", "p2c": "p2c",
         "peakewma": "p2c", "shortestresponse": "uniform", "consistenthash": "md5_ring",
         "boundedhash": "md5_ring", "maglev": "hash_table", "rendezvous": "hrw_scan", "orca": "stride",
         "roundrobin": "swrr_loop"}
print(f"{'strategy':<18}{'n':>6}{'ns/op':>10}{'floor':>12}{'floor ns':>10}{'ratio':>8}{'/p2c':>8}")
for group in ["select_report", "select_report_2threads", "beyond"]:
    d = root / group
    if not d.exists():
        continue
    # the 2-thread rows are wall ns/op over both threads; the floors are timed on 1 thread
    print(f"-- {group}" + (" (wall ns/op over 2 threads; floors on 1 thread)" if "2threads" in group else ""))
    for strat in sorted(p.name for p in d.iterdir() if p.is_dir() and p.name != "report"):
        for n in (2, 10, 100, 1000):
            t = ns(group, strat, n)
            if t is None:
                continue
            fl = FLOOR.get(strat.split("+")[0], "uniform")
            f = ns("floor", fl, n)
            p2c = ns("floor", "p2c", n)
            ratio = f"{t / f:.2f}" if f else "-"
            to_p2c = f"{t / p2c:.2f}" if p2c else "-"
            print(f"{strat:<18}{n:>6}{t:>10.1f}{fl:>12}{(f or 0):>10.1f}{ratio:>8}{to_p2c:>8}")
