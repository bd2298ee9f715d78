#!/usr/bin/env python3
"""polylb's Python binding beside pure-Python balancers a Python user would write instead,
on the same invoker set (weights 100/150/200), in one process (bench/run.sh).

Each pure-Python peer does the same work per call as polylb's select+report:
  - random: weighted random, bisect over a precomputed cumulative list (no report needed);
  - roundrobin: nginx/Dubbo smooth weighted round robin (O(n) per pick, as in Dubbo);
  - leastactive: Dubbo's least active (scan for the fewest in flight, weighted random among
    ties), in-flight counter incremented on select and decremented on report;
  - consistenthash: Dubbo's MD5 ring (hashlib.md5 of the key, bisect over 160·n points).
The floor is the ctypes cost of the same two C calls the binding makes (plb_select32 and
plb_report32, undeclared) with a NULL handle (see bindings/python/bench.py). Rows are timed in interleaved rounds with time.thread_time (1 thread) or wall time
over both threads (2 threads; the GIL serialises Python bytecode, and the binding's two hot
calls keep it during the C call, as the floor's do). Prints JSON lines.

    python3 bench/python_peers.py [--smoke]
"""
import bisect
import hashlib
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
import polylb  # noqa: E402
from polylb import Invoker, Outcome  # noqa: E402
from polylb._ffi import report32, select32  # noqa: E402

SUCCESS = int(Outcome.SUCCESS)


def weight(i):
    return 100 + (i % 3) * 50


def addr(i):
    return f"10.0.{i // 250}.{i % 250}:20880"


class PyRandom:
    def __init__(self, n):
        self.ids = list(range(n))
        self.cum, t = [], 0
        for i in range(n):
            t += weight(i)
            self.cum.append(t)
        self.total = t

    def select(self, key=None):
        return self.ids[bisect.bisect(self.cum, random.random() * self.total)]

    def report(self, i):
        pass


class PySmoothRR:
    def __init__(self, n):
        self.w = [weight(i) for i in range(n)]
        self.cur = [0] * n
        self.total = sum(self.w)
        self.lock = threading.Lock()

    def select(self, key=None):
        with self.lock:
            cur, w = self.cur, self.w
            best, mx = 0, -1 << 62
            for j in range(len(cur)):
                c = cur[j] + w[j]
                cur[j] = c
                if c > mx:
                    mx, best = c, j
            cur[best] -= self.total
            return best

    def report(self, i):
        pass


class PyLeastActive:
    def __init__(self, n):
        self.w = [weight(i) for i in range(n)]
        self.active = [0] * n

    def select(self, key=None):
        active, w = self.active, self.w
        least, ties, tw = None, [], 0
        for j in range(len(active)):
            a = active[j]
            if least is None or a < least:
                least, ties, tw = a, [j], w[j]
            elif a == least:
                ties.append(j)
                tw += w[j]
        if len(ties) == 1:
            pick = ties[0]
        else:
            off = random.random() * tw
            pick = ties[-1]
            for j in ties:
                off -= w[j]
                if off < 0:
                    pick = j
                    break
        active[pick] += 1
        return pick

    def report(self, i):
        self.active[i] -= 1


class PyRing:
    def __init__(self, n, replicas=160):
        pts = []
        for i in range(n):
            a = addr(i)
            for r in range(replicas // 4):
                d = hashlib.md5(f"{a}{r}".encode()).digest()
                for h in range(4):
                    pts.append((int.from_bytes(d[h * 4:h * 4 + 4], "little"), i))
        pts.sort()
        self.keys = [p[0] for p in pts]
        self.nodes = [p[1] for p in pts]

    def select(self, key):
        h = int.from_bytes(hashlib.md5(key).digest()[:4], "little")
        i = bisect.bisect_left(self.keys, h)
        return self.nodes[i if i < len(self.keys) else 0]

    def report(self, i):
        pass


PEERS = {"random": PyRandom, "roundrobin": PySmoothRR, "leastactive": PyLeastActive, "consistenthash": PyRing}


def run_rounds(bodies, counts, rounds, threads):
    """bodies: name -> callable(count) doing `count` operations; counts: name -> operations per
    round. Returns name -> best ns/op."""
    best = {name: float("inf") for name in bodies}
    for name, body in bodies.items():
        body(max(counts[name] // 10, 1))  # warm-up
    for _ in range(rounds):
        for name, body in bodies.items():
            number = counts[name]
            if threads == 1:
                t = time.thread_time_ns()
                body(number)
                ns = (time.thread_time_ns() - t) / number
            else:
                ts = [threading.Thread(target=body, args=(number // threads,)) for _ in range(threads)]
                t = time.perf_counter_ns()
                for th in ts:
                    th.start()
                for th in ts:
                    th.join()
                ns = (time.perf_counter_ns() - t) / (number // threads * threads)
            best[name] = min(best[name], ns)
    return best


def main():
    smoke = "--smoke" in sys.argv
    sizes = [10] if smoke else [10, 100, 1000]
    number, rounds = (2000, 2) if smoke else (20000, 7)
    keys = [random.randbytes(16) for _ in range(4096)]
    sel, rep = select32, report32
    for n in sizes:
        bodies = {}

        def floor(count):
            for _ in range(count):
                sel(None, 0, None, 0)
                rep(None, 0, 0, 1, 100, SUCCESS)
        bodies[("floor", "ctypes-select+report")] = floor
        balancers = []
        for strategy, cls in PEERS.items():
            lb = polylb.Balancer(strategy)
            lb.update([Invoker(i, addr(i), weight=weight(i)) for i in range(n)])
            balancers.append(lb)
            peer = cls(n)

            def ours(count, lb=lb):
                k = 0
                for _ in range(count):
                    k = (k + 1) & 4095
                    lb.report(lb.select(key=keys[k]), 100, SUCCESS)

            def theirs(count, peer=peer):
                k = 0
                for _ in range(count):
                    k = (k + 1) & 4095
                    peer.report(peer.select(keys[k]))
            bodies[("polylb", strategy)] = ours
            bodies[("pure-python", strategy)] = theirs
        # The O(n) pure-Python loops at n=1000 take ~30-50 µs per call: fewer calls for them
        # only. The 2-thread rows time starting and joining two threads (~0.25 ms) with the
        # calls, so a fast body given that few calls would carry ~100 ns/op of it.
        slow = {("pure-python", "roundrobin"), ("pure-python", "leastactive")}
        counts = {name: max(number // 10, 200) if n >= 1000 and name in slow else number
                  for name in bodies}
        for threads in (1, 2):
            for (impl, name), ns in run_rounds(bodies, counts, rounds, threads).items():
                print(json.dumps(dict(suite="python", kind="select", impl=impl, name=name, n=n,
                                      threads=threads, value=round(ns, 1), unit="ns")), flush=True)
                print(f"python {impl:<12} {name:<22} n={n:<5} t={threads} {ns:10.0f} ns", file=sys.stderr)
        for lb in balancers:
            lb.close()
    call_rows(number, rounds)


def call_rows(number, rounds):
    """`with lb.call()` against the same work by hand (select, two perf_counter_ns reads,
    report), n = 10, one thread: what the call object adds."""
    n = 10
    lb = polylb.Balancer("random")
    lb.update([Invoker(i, addr(i), weight=weight(i)) for i in range(n)])
    clock = time.perf_counter_ns

    def call_object(count):
        for _ in range(count):
            with lb.call() as call:
                call.id

    def by_hand(count):
        for _ in range(count):
            i = lb.select()
            started = clock()
            lb.report(i, (clock() - started) // 1000, SUCCESS)
    bodies = {"call-object": call_object, "by-hand": by_hand}
    for impl, ns in run_rounds(bodies, dict.fromkeys(bodies, number), rounds, 1).items():
        print(json.dumps(dict(suite="python", kind="call", impl=impl, name="random", n=n,
                              threads=1, value=round(ns, 1), unit="ns")), flush=True)
        print(f"python call {impl:<12} random n={n:<5} t=1 {ns:10.0f} ns", file=sys.stderr)
    lb.close()


if __name__ == "__main__":
    main()
