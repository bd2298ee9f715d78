"""Each of Dubbo's six strategies, driven through Python: the behaviour that names it.

These check that the binding carries each strategy's inputs (keys, in-flight counts, latencies,
provider metrics, weights, time) to the library; the strategies' fine detail is tested in Rust.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

import polylb
from conftest import by_id, dubbo_ring, invokers
from polylb import Invoker, Outcome

STRATEGIES = ["random", "roundrobin", "leastactive", "shortestresponse", "consistenthash", "adaptive"]
NOW_US = 1_700_000_000_000_000


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_selects_reports_and_names_itself(strategy: str, balancer_factory: Any) -> None:
    lb = balancer_factory(strategy, seed=42)
    lb.update(invokers(4))
    seen = Counter()
    for i in range(400):
        with lb.call(key=f"user-{i}") as call:
            seen[call.id] += 1
    assert set(seen) <= {1, 2, 3, 4}
    assert len(seen) == 4  # every strategy spreads distinct keys / fresh calls over equal invokers
    stats = lb.stats()
    assert stats["strategy"] == strategy
    assert sum(row["selected"] for row in stats["invokers"]) == 400
    assert all(row["active"] == 0 for row in stats["invokers"])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_respects_subsets(strategy: str, balancer_factory: Any) -> None:
    lb = balancer_factory(strategy, seed=7)
    lb.update(invokers(5))
    for i in range(100):
        picked = lb.select(key=f"k{i}", among=[2, 3, 5], exclude=[3])
        assert picked in (2, 5)
        lb.report(picked, 100, Outcome.SUCCESS)


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "consistenthash"])
def test_zero_weight_with_a_positive_peer_is_never_picked(strategy: str, balancer_factory: Any) -> None:
    # (consistenthash ignores weights, as Dubbo's does)
    lb = balancer_factory(strategy, seed=1)
    lb.update([Invoker(1, "10.0.0.1:20880", weight=0), Invoker(2, "10.0.0.2:20880", weight=100)])
    for _ in range(200):
        picked = lb.select(now_us=NOW_US)
        lb.report(picked, 100, Outcome.SUCCESS, now_us=NOW_US)
        assert picked == 2


def test_roundrobin_follows_weights_exactly(balancer_factory: Any) -> None:
    lb = balancer_factory("roundrobin")
    lb.update(invokers(3, weights=[3, 2, 1]))
    picks = [lb.select(now_us=NOW_US) for _ in range(600)]
    assert Counter(picks) == {1: 300, 2: 200, 3: 100}
    # And in Dubbo's smooth order, not merely the right counts: each pick adds every weight to
    # its invoker's current weight, takes the first largest and subtracts the total from it.
    weights = {1: 3, 2: 2, 3: 1}
    current = {i: 0 for i in weights}
    expected = []
    for _ in range(600):
        for i, w in weights.items():
            current[i] += w
        best = max(current, key=lambda i: (current[i], -i))
        current[best] -= sum(weights.values())
        expected.append(best)
    assert picks == expected


def test_roundrobin_keeps_position_across_update(balancer_factory: Any) -> None:
    # Dubbo keeps each invoker's current weight while the set changes; an identical update must
    # therefore not restart the sequence.
    reference = balancer_factory("roundrobin")
    reference.update(invokers(3, weights=[5, 1, 1]))
    expected = [reference.select(now_us=NOW_US) for _ in range(14)]
    lb = balancer_factory("roundrobin")
    lb.update(invokers(3, weights=[5, 1, 1]))
    got = [lb.select(now_us=NOW_US) for _ in range(7)]
    lb.update(invokers(3, weights=[5, 1, 1]))
    got += [lb.select(now_us=NOW_US) for _ in range(7)]
    assert got == expected


def test_leastactive_prefers_fewer_in_flight(balancer_factory: Any) -> None:
    lb = balancer_factory("leastactive", seed=3)
    lb.update(invokers(3))
    held = [lb.select() for _ in range(3)]
    assert sorted(held) == [1, 2, 3]  # each select sees the previous ones in flight
    lb.report(held[1], 100, Outcome.SUCCESS)
    assert lb.select() == held[1]  # the only one with nothing in flight


def test_leastactive_counts_per_method(balancer_factory: Any) -> None:
    lb = balancer_factory("leastactive", seed=3)
    lb.update(invokers(2))
    hello, bye = lb.method("sayHello"), lb.method("sayBye")
    first = lb.select(method=hello)
    assert lb.select(method=hello) != first
    lb.select(method=hello, among=[first])  # `first` now has 2 sayHello calls in flight, the other 1
    assert lb.select(method=hello) != first
    # sayBye has nothing in flight: both invokers tie at equal weights, so each pick is a fair
    # coin and invoker 1's count is Binomial(4000, 1/2): within 5 sigma (5 * 31.6) of 2000.
    picks: Counter = Counter()
    for _ in range(4000):
        picked = lb.select(method=bye)
        picks[picked] += 1
        lb.report(picked, 100, Outcome.SUCCESS, method=bye)
    assert set(picks) == {1, 2}
    assert abs(picks[1] - 2000) <= 5 * math.sqrt(4000 * 0.25), picks


def test_shortestresponse_prefers_the_fast_provider(balancer_factory: Any) -> None:
    lb = balancer_factory("shortestresponse", seed=5)
    lb.update(invokers(2))
    latency_us = {1: 1_000, 2: 50_000}
    for invoker_id, elapsed in latency_us.items():  # both have a success in the window
        lb.report(lb.select(among=[invoker_id], now_us=NOW_US), elapsed, Outcome.SUCCESS, now_us=NOW_US)
    for _ in range(100):
        picked = lb.select(now_us=NOW_US)
        assert picked == 1
        lb.report(picked, latency_us[picked], Outcome.SUCCESS, now_us=NOW_US)


def test_consistenthash_is_sticky_and_minimal_on_removal(balancer_factory: Any) -> None:
    lb = balancer_factory("consistenthash")
    lb.update(invokers(5))
    keys = [f"user-{i}" for i in range(500)]
    before = {key: lb.select(key=key) for key in keys}
    assert all(lb.select(key=key) == before[key] for key in keys)  # same key, same provider
    lb.update([invoker for invoker in invokers(5) if invoker.id != 3])
    after = {key: lb.select(key=key) for key in keys}
    moved = [key for key in keys if before[key] != after[key]]
    assert moved and all(before[key] == 3 for key in moved)  # only keys of the removed node move


def test_consistenthash_nodes_change_the_ring(balancer_factory: Any) -> None:
    keys = [f"user-{i}" for i in range(200)]
    small = balancer_factory("consistenthash", hash_nodes=4)
    large = balancer_factory("consistenthash", hash_nodes=160)
    for lb in (small, large):
        lb.update(invokers(3))
    # Each ring is the one Dubbo's rule builds with that many nodes per invoker (the reference
    # is computed from MD5 in conftest, not by the library), and the two differ.
    addresses = {i: f"10.0.0.{i}:20880" for i in range(1, 4)}
    for lb, nodes in ((small, 4), (large, 160)):
        owner = dubbo_ring(addresses, nodes)
        assert [lb.select(key=k) for k in keys] == [owner(k) for k in keys], f"hash.nodes={nodes}"
    assert [small.select(key=k) for k in keys] != [large.select(key=k) for k in keys]


def test_adaptive_prefers_the_lightly_loaded_provider(balancer_factory: Any) -> None:
    lb = balancer_factory("adaptive", seed=9)
    lb.update(invokers(2))
    now_ms = NOW_US // 1000
    lb.report_provider_metrics(1, now_ms, 0.1, 1_000, now_us=NOW_US)
    lb.report_provider_metrics(2, now_ms, 0.9, 1_000, now_us=NOW_US)
    picks = Counter()
    for step in range(200):
        now_us = NOW_US + step * 1000
        picked = lb.select(now_us=now_us)
        picks[picked] += 1
        lb.report(picked, 1_000, Outcome.SUCCESS, now_us=now_us)
        load = 0.1 if picked == 1 else 0.9
        lb.report_provider_metrics(picked, now_us // 1000, load, 1_000, now_us=now_us)
    assert picks[1] > 150, picks


def test_warmup_weight_shapes_random_picks(balancer_factory: Any) -> None:
    # Invoker 2 started 1 s ago with a 100 s warm-up: its effective weight is 1, against 100.
    lb = balancer_factory("random", seed=42)
    started_ms = NOW_US // 1000 - 1_000
    lb.update(
        [
            Invoker(1, "10.0.0.1:20880"),
            Invoker(2, "10.0.0.2:20880", start_time_ms=started_ms, warmup_ms=100_000),
        ]
    )
    assert by_id(lb.stats(now_us=NOW_US))[2]["effective_weight"] == 1
    picks = Counter(lb.select(now_us=NOW_US) for _ in range(2000))
    assert picks[2] < 80  # expected 2000/101 ≈ 20; would be ~1000 without warm-up


def test_config_warmup_default_applies(balancer_factory: Any) -> None:
    lb = balancer_factory("random", warmup=10_000)
    started_ms = NOW_US // 1000 - 5_000
    lb.update([Invoker(1, "10.0.0.1:20880", start_time_ms=started_ms)])
    assert by_id(lb.stats(now_us=NOW_US))[1]["effective_weight"] == 50
