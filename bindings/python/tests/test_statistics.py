"""Distributions of the randomised strategies, with a fixed seed (``seed=42``).

Each invoker's pick count over n draws is Binomial(n, p) with p its share of the weight, so it
must lie within 5 standard deviations, 5·sqrt(n·p·(1-p)), of n·p. A correct strategy leaves
that band with probability below 1e-6 per count; the fixed seed makes every run identical anyway,
so a failure here is a real change in behaviour, not noise.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

import pytest

from conftest import dubbo_ring, invokers
from polylb import Balancer, Outcome

SIGMAS = 5.0


def assert_binomial(counts: Counter, weights: Dict[int, int], draws: int) -> None:
    total = sum(weights.values())
    assert sum(counts.values()) == draws
    assert set(counts) <= set(weights), f"picked outside the candidates: {counts}"
    failures = []
    for invoker_id, weight in weights.items():
        p = weight / total
        expected = draws * p
        tolerance = SIGMAS * math.sqrt(draws * p * (1 - p))
        got = counts.get(invoker_id, 0)
        if abs(got - expected) > tolerance:
            failures.append(f"id {invoker_id}: {got} picks, expected {expected:.0f} ± {tolerance:.0f}")
    assert not failures, "; ".join(failures)


def draw(
    lb: Balancer,
    draws: int,
    among: Optional[Sequence[int]] = None,
    report: bool = True,
) -> Counter:
    counts: Counter = Counter()
    for _ in range(draws):
        picked = lb.select(among=among)
        counts[picked] += 1
        if report:  # keeps in-flight counts at 0, so active-aware strategies see ties
            lb.report(picked, 1_000, Outcome.SUCCESS)
    return counts


def test_random_weighted(balancer_factory: Any) -> None:
    lb = balancer_factory("random", seed=42)
    weights = [1, 2, 3, 4]
    lb.update(invokers(4, weights))
    draws = 40_000
    assert_binomial(draw(lb, draws, report=False), {i + 1: w for i, w in enumerate(weights)}, draws)


def test_random_uniform(balancer_factory: Any) -> None:
    lb = balancer_factory("random", seed=42)
    lb.update(invokers(5))
    draws = 25_000
    assert_binomial(draw(lb, draws, report=False), {i: 1 for i in range(1, 6)}, draws)


def test_random_subset_is_weighted_within_the_subset(balancer_factory: Any) -> None:
    lb = balancer_factory("random", seed=42)
    lb.update(invokers(4, [1, 2, 3, 4]))
    draws = 20_000
    assert_binomial(draw(lb, draws, among=[2, 4], report=False), {2: 2, 4: 4}, draws)


@pytest.mark.parametrize("strategy", ["random", "leastactive", "p2c"])
def test_subset_with_exclusions_is_weighted_over_what_is_left(strategy: str, balancer_factory: Any) -> None:
    # Candidates 1, 3, 4, 5 less the exclusions 99 (unknown, ignored) and 3, as a failover would
    # ask: 1, 4 and 5 are left, weighing 1:4:5, and each call is reported before the next, so
    # these strategies draw among them by weight. Membership alone would pass a binding that
    # returns the first candidate left, or passes one id too few of either list (the last
    # candidate and the last exclusion both matter here), or ignores the weights.
    lb = balancer_factory(strategy, seed=42)
    lb.update(invokers(5, [1, 2, 3, 4, 5]))
    draws = 20_000
    counts: Counter = Counter()
    for _ in range(draws):
        picked = lb.select(among=[1, 3, 4, 5], exclude=[99, 3])
        counts[picked] += 1
        lb.report(picked, 1_000, Outcome.SUCCESS)
    assert_binomial(counts, {1: 1, 4: 4, 5: 5}, draws)


@pytest.mark.parametrize("strategy", ["leastactive", "shortestresponse", "adaptive"])
def test_ties_are_broken_by_weight(strategy: str, balancer_factory: Any) -> None:
    # With every call reported at once (nothing in flight, no latency or load known yet), these
    # strategies see a tie and fall back to Dubbo's weighted random choice.
    lb = balancer_factory(strategy, seed=42)
    lb.update(invokers(2, [1, 3]))
    draws = 20_000
    if strategy == "shortestresponse":
        # a success would give an invoker a latency estimate; a failure leaves both at 0
        counts: Counter = Counter()
        for _ in range(draws):
            picked = lb.select()
            counts[picked] += 1
            lb.report(picked, 1_000, Outcome.FAILURE)
    else:
        counts = draw(lb, draws)
    assert_binomial(counts, {1: 1, 2: 3}, draws)


def test_adaptive_without_metrics_is_uniform_over_equal_weights(balancer_factory: Any) -> None:
    lb = balancer_factory("adaptive", seed=42)
    lb.update(invokers(4))
    draws = 20_000
    assert_binomial(draw(lb, draws), {i: 1 for i in range(1, 5)}, draws)


def test_consistenthash_spreads_distinct_keys(balancer_factory: Any) -> None:
    # Every key goes where Dubbo's ring rule (computed here from MD5, not from the library)
    # sends it; and since MD5 of distinct keys is uniform on 2^32, each invoker's count is
    # Binomial(n, arc share), so it must lie within 5 sigma of n * arc share (not a blanket 10 %).
    lb = balancer_factory("consistenthash")
    lb.update(invokers(4))
    owner = dubbo_ring({i: f"10.0.0.{i}:20880" for i in range(1, 5)})
    draws = 8_000
    keys = [f"key-{i}" for i in range(draws)]
    picked = [lb.select(key=key) for key in keys]
    wrong = [(key, got, owner(key)) for key, got in zip(keys, picked) if got != owner(key)]
    assert not wrong, f"{len(wrong)} keys off Dubbo's ring, e.g. (key, got, expected) {wrong[:3]}"
    counts = Counter(picked)
    shares = {i: owner.share(i) for i in range(1, 5)}
    assert abs(sum(shares.values()) - 1.0) < 1e-12
    for invoker_id, p in shares.items():
        tolerance = SIGMAS * math.sqrt(draws * p * (1 - p))
        assert abs(counts[invoker_id] - draws * p) <= tolerance, (
            f"id {invoker_id}: {counts[invoker_id]} keys, expected {draws * p:.0f} ± {tolerance:.0f}"
        )


def test_seed_makes_choices_reproducible(balancer_factory: Any) -> None:
    def sequence(seed: int) -> List[int]:
        lb = balancer_factory("random", seed=seed)
        lb.update(invokers(10))
        return [lb.select() for _ in range(200)]

    assert sequence(42) == sequence(42)
    assert sequence(42) != sequence(43)
