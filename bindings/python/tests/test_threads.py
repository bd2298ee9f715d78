"""Concurrency: many threads selecting and reporting while another replaces the invoker set.

ctypes' CDLL releases the GIL around each call, so these calls really do overlap inside the
library. Afterwards nothing may be left in flight: every select was matched by one report, and
reports for invokers that left the set in between are ignored without going below zero.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List

import pytest

import polylb
from conftest import invokers
from polylb import Invoker, Outcome

STRATEGIES = [
    "random", "roundrobin", "leastactive", "shortestresponse", "consistenthash", "adaptive", "maglev", "rendezvous",
    "orca",
]
WORKERS = 16
CALLS_PER_WORKER = 400

FULL_SET = invokers(8)
# Shares ids 1..6 with FULL_SET (their state must survive), drops 7 and 8, adds 9 and 10.
OTHER_SET = invokers(6) + [Invoker(9, "10.0.0.9:20880"), Invoker(10, "10.0.0.10:20880", weight=50)]
OUTCOMES = [Outcome.SUCCESS, Outcome.SUCCESS, Outcome.FAILURE, Outcome.TIMEOUT, Outcome.CANCELLED]
# The stats counters each outcome adds to (a timeout is also a failure; a cancelled call adds to
# none of these).
COUNTED = {
    Outcome.SUCCESS: ("succeeded",),
    Outcome.FAILURE: ("failures",),
    Outcome.TIMEOUT: ("failures", "timeouts"),
    Outcome.CANCELLED: (),
}
EVER = {invoker.id for invoker in FULL_SET + OTHER_SET}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_select_and_report_while_updating(strategy: str, balancer_factory: Any) -> None:
    lb: polylb.Balancer = balancer_factory(strategy)
    lb.update(FULL_SET)
    hello = lb.method("sayHello")
    done = threading.Event()
    updates = 0

    def updater() -> None:
        nonlocal updates
        while not done.is_set():
            lb.update(OTHER_SET if updates % 2 == 0 else FULL_SET)
            updates += 1
            lb.stats()  # reading a snapshot concurrently is fine too

    def worker(seed: int) -> Counter:
        rng = random.Random(seed)
        tally: Counter = Counter()  # (id, "selected" or the outcome's stats field) -> count
        for i in range(CALLS_PER_WORKER):
            method = hello if i % 2 else 0
            if i % 7 == 0:
                # a subset of ids that every version of the set contains
                picked = lb.select(key=f"user-{rng.randrange(1000)}", method=method, among=[1, 2, 3], exclude=[2])
                assert picked in (1, 3)
            else:
                picked = lb.select(key=f"user-{rng.randrange(1000)}", method=method)
                assert picked in EVER, picked
            outcome = rng.choice(OUTCOMES)
            tally[picked, "selected"] += 1
            for field in COUNTED[outcome]:
                tally[picked, field] += 1
            lb.report(picked, rng.randrange(100, 5_000), outcome, method=method)
        return tally

    update_thread = threading.Thread(target=updater)
    update_thread.start()
    try:
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            results: List[Counter] = list(pool.map(worker, range(WORKERS)))
    finally:
        done.set()
        update_thread.join()

    assert updates > 0
    # Ids 1..6 are in every version of the set, so their counters were kept through every
    # update: each equals what the workers did to that id, whatever the interleaving.
    tally = sum(results, Counter())
    assert sum(tally[i, "selected"] for i in EVER) == WORKERS * CALLS_PER_WORKER
    rows = {row["id"]: row for row in lb.stats()["invokers"]}
    for i in range(1, 7):
        for field in ("selected", "succeeded", "failures", "timeouts"):
            assert rows[i][field] == tally[i, field], (i, field, rows[i][field], tally[i, field])
    lb.update(FULL_SET)  # bring ids 7 and 8 back: their fresh state must be idle too
    stats = lb.stats()
    assert len(stats["invokers"]) == len(FULL_SET)
    for row in stats["invokers"]:
        assert row["active"] == 0, row
        for per_method in row.get("methods", []):
            assert per_method["active"] == 0, row


def test_concurrent_calls_through_the_context_manager(balancer_factory: Any) -> None:
    lb: polylb.Balancer = balancer_factory("leastactive")
    lb.update(invokers(4))

    def worker(n: int) -> None:
        for i in range(200):
            try:
                with lb.call(method="sayHello"):
                    if (n + i) % 5 == 0:
                        raise ConnectionError("simulated")
            except ConnectionError:
                pass

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(worker, range(WORKERS)))
    stats = lb.stats()
    assert sum(row["selected"] for row in stats["invokers"]) == WORKERS * 200
    assert sum(row["failures"] for row in stats["invokers"]) == WORKERS * 200 // 5
    assert all(row["active"] == 0 for row in stats["invokers"])


def test_method_interning_from_many_threads(balancer_factory: Any) -> None:
    lb: polylb.Balancer = balancer_factory()

    def worker(n: int) -> List[int]:
        return [lb.method(f"m{i}") for i in range(100)]

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = list(pool.map(worker, range(WORKERS)))
    assert all(ids == results[0] for ids in results)
    assert len(set(results[0])) == 100


def test_interpreter_exit_with_daemon_threads_still_selecting(tmp_path: Any) -> None:
    # The finalizer must not free a balancer that daemon threads are still using at exit.
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = """
import threading, time, polylb
lb = polylb.Balancer("leastactive")
lb.update([polylb.Invoker(i, f"10.0.0.{i}:20880") for i in range(1, 5)])
def spin():
    while True:
        lb.report(lb.select(), 100, polylb.Outcome.SUCCESS)
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
time.sleep(0.2)
print("exiting")
"""
    env = dict(os.environ, PYTHONPATH=str(Path(polylb.__file__).resolve().parent.parent))
    for _ in range(3):
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0 and "exiting" in result.stdout, result.stderr


def test_close_racing_selects_never_reaches_freed_memory() -> None:
    # close() used to free the handle while another thread could be inside plb_select with it
    # (ctypes releases the GIL): a use after free. Now each racing call returns an id of the set
    # or raises BalancerClosedError.
    for _ in range(100):
        lb = polylb.Balancer("leastactive")
        lb.update(invokers(3))
        started = threading.Barrier(3)
        unexpected: List[BaseException] = []

        def spin() -> None:
            started.wait()
            try:
                while True:
                    picked = lb.select()
                    if picked not in (1, 2, 3):
                        unexpected.append(AssertionError(f"id {picked}"))
                        return
                    lb.report(picked, 10, Outcome.SUCCESS)
            except polylb.BalancerClosedError:
                pass
            except BaseException as error:  # noqa: BLE001 - any other outcome is the failure
                unexpected.append(error)

        threads = [threading.Thread(target=spin) for _ in range(2)]
        for t in threads:
            t.start()
        started.wait()
        lb.close()
        for t in threads:
            t.join()
        assert not unexpected, unexpected
        assert lb.closed


def test_close_racing_stats_returns_the_whole_set_or_raises_closed() -> None:
    # close() marks the balancer closed and then empties its set; a stats() that had read the
    # handle before and snapshotted after used to return {"invokers": []}, a state the balancer
    # never had while open. Each racing stats() must return the whole set or raise
    # BalancerClosedError.
    whole = invokers(2000)
    for _ in range(150):
        lb = polylb.Balancer("random")
        lb.update(whole)
        started = threading.Barrier(2)
        sizes: List[Any] = []

        def read() -> None:
            started.wait()
            try:
                while True:
                    sizes.append(len(lb.stats()["invokers"]))
            except polylb.BalancerClosedError:
                sizes.append("closed")
            except BaseException as error:  # noqa: BLE001 - any other outcome is the failure
                sizes.append(error)

        reader = threading.Thread(target=read)
        reader.start()
        started.wait()
        time.sleep(random.uniform(0, 0.004))
        lb.close()
        reader.join()
        assert sizes[-1] == "closed" and all(size == len(whole) for size in sizes[:-1]), sizes
