#!/usr/bin/env python3
"""Turns a JMH JSON result (-rf json) of BalancerBench / DubboSelectBench into the README tables.

Each row shows the median of the measurement iterations (more robust than the mean on a shared,
noisy machine) and, in brackets, the min-max; ratios are computed from medians of the same run.
Usage: python3 report.py results.json
"""
import json
import statistics
import sys


def stats(entry):
    raw = [v for fork in entry["primaryMetric"]["rawData"] for v in fork]
    return statistics.median(raw), min(raw), max(raw)


def fmt(ns):
    return f"{ns:,.0f}" if ns >= 100 else f"{ns:.1f}"


def main(path):
    results = json.load(open(path))
    balancer = {}
    dubbo = {}
    for e in results:
        name = e["benchmark"].rsplit(".", 2)
        params = e.get("params", {})
        if name[-2] == "BalancerBench":
            balancer[(name[-1], int(params["n"]))] = stats(e)
        elif name[-2] == "DubboSelectBench":
            key = (params["strategy"], int(params["n"]), params.get("list", "arraylist"), params["impl"])
            dubbo[key] = stats(e)

    if balancer:
        print("io.polylb.Balancer (ns/op, median [min-max]; ratio = median / Java floor median, same n)\n")
        print("| benchmark | n=10 | ratio | n=100 | ratio |")
        print("|---|---|---|---|---|")
        order = ["javaFloorWeightedPick", "polylbRandomSelectOnly", "polylbRandomSelectReport",
                 "polylbRandomSelectTimedReport", "polylbRandomCallFinish",
                 "polylbRandomSelectAmongAllReport", "polylbConsistentHashSelectReport"]
        for bench in order:
            cells = []
            for n in (10, 100):
                if (bench, n) not in balancer:
                    cells += ["-", "-"]
                    continue
                med, lo, hi = balancer[(bench, n)]
                floor = balancer.get(("javaFloorWeightedPick", n), (None,))[0]
                cells += [f"{fmt(med)} [{fmt(lo)}-{fmt(hi)}]", f"{med / floor:.1f}x" if floor else "-"]
            print(f"| {bench} | " + " | ".join(cells) + " |")
        print()

    if dubbo:
        lists = sorted({k[2] for k in dubbo})
        for kind in lists:
            print(f"LoadBalance.select, {kind} (ns/op, median [min-max]; speed-up = Dubbo median / polylb median)\n")
            print("| strategy | n | Dubbo | polylb adapter | speed-up |")
            print("|---|---|---|---|---|")
            for strategy in ["random", "roundrobin", "leastactive", "shortestresponse", "consistenthash"]:
                for n in (10, 100):
                    d = dubbo.get((strategy, n, kind, "dubbo"))
                    p = dubbo.get((strategy, n, kind, "polylb"))
                    if not d or not p:
                        continue
                    print(f"| {strategy} | {n} | {fmt(d[0])} [{fmt(d[1])}-{fmt(d[2])}] | "
                          f"{fmt(p[0])} [{fmt(p[1])}-{fmt(p[2])}] | {d[0] / p[0]:.1f}x |")
            print()


if __name__ == "__main__":
    main(sys.argv[1])
