"""Per-call cost of the Python binding, against floors measured in the same run (timeit).

    python3 bindings/python/bench.py            # about a minute
    python3 bindings/python/bench.py --quick    # a few seconds, rougher

The floor for select+report is the same two C functions the binding calls for it
(plb_select32 and plb_report32, without argtypes) with the same argument shapes, but with a
NULL handle: the library answers at once (a panic guard and a NULL check, a few ns), so what
remains is exactly the ctypes cost that any binding of this ABI must pay: argument conversion,
the GIL release, the foreign call and the result conversion. The wide calls (plb_select and
plb_report with argtypes, what the binding used before) are timed the same way beside it. That is fairer than a zero-argument export such as plb_abi_version, whose
call skips the per-argument conversion that dominates ctypes' cost (shown too, for reference).

Rows are timed in interleaved rounds (every row once per round, so a burst of load from
another process hits all rows alike) with the thread's CPU clock (time.thread_time, so time
spent descheduled is not counted), and each row reports its best round in ns per operation,
loop overhead included. Absolute numbers move a lot on a shared VM; the ratios within one run
are the result.
"""

from __future__ import annotations

import argparse
import bisect
import random
import statistics
import sys
import time
import timeit
from typing import Any, Dict, List, Tuple

import polylb
from polylb import Invoker, Outcome
from polylb._ffi import lib, report32, select32

SUCCESS = int(Outcome.SUCCESS)


def measure_rounds(
    statements: List[str], namespace: Dict[str, Any], number: int, rounds: int
) -> List[List[float]]:
    """ns per operation of each statement (outer list) in each interleaved round (inner list)."""
    timers = [timeit.Timer(s, globals=namespace, timer=time.thread_time) for s in statements]
    for timer in timers:
        timer.timeit(number // 10 or 1)  # warm up caches and the specialising interpreter
    samples: List[List[float]] = [[] for _ in timers]
    for _ in range(rounds):
        for index, timer in enumerate(timers):
            samples[index].append(timer.timeit(number) / number * 1e9)
    return samples


def paired_ratio(numerator: List[float], denominator: List[float]) -> float:
    """Median over rounds of the per-round ratio: load that shifts a whole round cancels out."""
    return statistics.median(n / d for n, d in zip(numerator, denominator))


def weighted_invokers(n: int) -> List[Invoker]:
    rng = random.Random(1)
    return [Invoker(i, f"10.0.{i // 250}.{i % 250}:20880", weight=rng.randint(1, 100)) for i in range(n)]


def bisect_picker(n: int) -> Tuple[List[int], List[int], int]:
    weights = [invoker.weight for invoker in weighted_invokers(n)]
    cumulative: List[int] = []
    total = 0
    for weight in weights:
        total += weight
        cumulative.append(total)
    return list(range(n)), cumulative, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (rough numbers)")
    parser.add_argument("-n", "--invokers", type=int, default=10, help="invokers in the set (default 10)")
    parser.add_argument("--number", type=int, help="calls per row per round (overrides --quick)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (overrides --quick)")
    args = parser.parse_args()
    number, rounds = (10_000, 5) if args.quick else (50_000, 15)
    number, rounds = args.number or number, args.rounds or rounds

    select_raw, report_raw = lib.plb_select, lib.plb_report
    abi_version = lib.plb_abi_version
    n = args.invokers

    balancers = {}
    for strategy in ("random", "roundrobin", "leastactive", "consistenthash"):
        balancer = polylb.Balancer(strategy)
        balancer.update(weighted_invokers(n))
        balancers[strategy] = balancer
    lb = balancers["random"]
    handle = lb._handle
    say_hello = lb.method("sayHello")
    population, cumulative, total = bisect_picker(n)

    namespace: Dict[str, Any] = {
        "select_raw": select_raw,
        "select32": select32,
        "report32": report32,
        "report_raw": report_raw,
        "abi_version": abi_version,
        "handle": handle,
        "hot_handle": lb._hot_handle,
        "SUCCESS": SUCCESS,
        "Outcome": Outcome,
        "lb": lb,
        "rr": balancers["roundrobin"],
        "la": balancers["leastactive"],
        "ch": balancers["consistenthash"],
        "say_hello": say_hello,
        "bisect": bisect.bisect,
        "random": random.random,
        "cumulative": cumulative,
        "total": total,
        "population": population,
    }

    rows: List[Tuple[str, str]] = [
        ("floor: ctypes select32+report32, no argtypes, NULL handle", "select32(None, 0, None, 0); report32(None, 0, 0, 1, 100, SUCCESS)"),
        ("wide calls: select+report with argtypes, NULL handle", "select_raw(0, 0, None, 0, 0); report_raw(0, 0, 1, 100, SUCCESS, 0)"),
        ("floor: ctypes plb_abi_version() x2 (no arguments)", "abi_version(); abi_version()"),
        ("raw ctypes select32+report32 on a real handle (random)", "report32(hot_handle, 0, 0, select32(hot_handle, 0, None, 0), 100, SUCCESS)"),
        ("raw wide calls on a real handle (random)", "report_raw(handle, 0, select_raw(handle, 0, None, 0, 0), 100, SUCCESS, 0)"),
        ("binding: lb.select() + lb.report() (random)", "lb.report(lb.select(), 100, SUCCESS)"),
        ("binding: same, Outcome enum", "lb.report(lb.select(), 100, Outcome.SUCCESS)"),
        ("binding: same, method id", "lb.report(lb.select(method=say_hello), 100, SUCCESS, method=say_hello)"),
        ("binding: roundrobin", "rr.report(rr.select(), 100, SUCCESS)"),
        ("binding: leastactive", "la.report(la.select(), 100, SUCCESS)"),
        ("binding: consistenthash, str key", "ch.report(ch.select(key='user-42'), 100, SUCCESS)"),
        ("binding: with lb.call(): pass", "with lb.call(): pass"),
        ("floor: ctypes select32 alone, NULL handle", "select32(None, 0, None, 0)"),
        ("binding: lb.select() alone", "lb.select()"),
        ("pure Python: bisect weighted pick", "population[bisect(cumulative, random() * total)]"),
    ]

    # random's pick does not depend on in-flight counts, so "lb.select() alone" leaving calls
    # in flight does not change what it measures.
    samples = measure_rounds([statement for _, statement in rows], namespace, number, rounds)
    rounds_of = {label: values for (label, _), values in zip(rows, samples)}
    results = {label: min(values) for label, values in rounds_of.items()}

    floor = results[rows[0][0]]
    print(f"python {sys.version.split()[0]}, libpolylb {polylb.library_version()}, n={n} invokers, "
          f"best of {rounds} interleaved rounds x {number} calls per row, thread CPU time\n")
    print("| what | ns per op | × floor |")
    print("|---|---:|---:|")
    for label, _ in rows:
        value = results[label]
        print(f"| {label} | {value:.0f} | {value / floor:.2f} |")
    select_floor = results["floor: ctypes select32 alone, NULL handle"]
    bisect_ns = results["pure Python: bisect weighted pick"]
    select_ns = results["binding: lb.select() alone"]
    print()
    binding = "binding: lb.select() + lb.report() (random)"
    raw = "raw ctypes select32+report32 on a real handle (random)"
    floor_label = rows[0][0]
    select_label = "binding: lb.select() alone"
    print("ratios: best round / best round, and in brackets the median of per-round ratios")
    print(f"select+report / floor = {results[binding] / floor:.2f} "
          f"[{paired_ratio(rounds_of[binding], rounds_of[floor_label]):.2f}] (goal <= 1.5)")
    wide_label = "wide calls: select+report with argtypes, NULL handle"
    print(f"select+report / the wide calls' floor = {results[binding] / results[wide_label]:.2f} "
          f"[{paired_ratio(rounds_of[binding], rounds_of[wide_label]):.2f}] (the floor of the declared "
          "plb_select + plb_report the binding used before)")
    print(f"select+report / raw ctypes on the same handle = {results[binding] / results[raw]:.2f} "
          f"[{paired_ratio(rounds_of[binding], rounds_of[raw]):.2f}] (the binding's own share)")
    print(f"select alone / select floor = {select_ns / select_floor:.2f} "
          f"[{paired_ratio(rounds_of[select_label], rounds_of['floor: ctypes select32 alone, NULL handle']):.2f}]")
    print(f"select alone / pure-Python bisect pick = {select_ns / bisect_ns:.2f} "
          f"[{paired_ratio(rounds_of[select_label], rounds_of['pure Python: bisect weighted pick']):.2f}]")
    for balancer in balancers.values():
        balancer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
