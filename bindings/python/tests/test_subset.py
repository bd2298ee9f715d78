"""Subsetting (``subset.size`` / ``subset.key`` / ``subset.index``) through the Python binding:
picks stay in the subset the stats mark ``in_subset``, the subset depends on the key and the
addresses only, a failover leaves it only once its members are all excluded, bad configs raise
``ConfigError``, and the subset of one fixed scenario is the one every language must agree on.
Subsets dealt by ``subset.index`` hold every invoker equally often over consumers 0..C-1, so
``random``, ``roundrobin`` and ``orca`` take them (not ``subset.key``), and their fixed scenario
is shared with the other languages too.

The choice itself (rendezvous hashing, spill-over, churn) is tested in Rust
(tests/beyond_dubbo/subset.rs); these check that the binding carries it unchanged.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, List, Set

import pytest

import polylb
from conftest import assert_config_error_naming, invokers
from polylb import Invoker, Outcome

PICKS = 3000


def in_subset(lb: polylb.Balancer) -> Set[int]:
    rows = lb.stats()["invokers"]
    assert all("in_subset" in row for row in rows), "every row carries in_subset with subset.size"
    return {row["id"] for row in rows if row["in_subset"]}


@pytest.mark.parametrize("strategy", ["p2c", "leastactive"])
def test_picks_stay_in_the_subset_and_use_all_of_it(strategy: str, balancer_factory: Any) -> None:
    # Keyword arguments: subset_size=3, subset_key="h1" is subset.size=3&subset.key=h1.
    lb = balancer_factory(strategy, subset_size=3, subset_key="h1", seed=11)
    assert "subset.size=3" in lb.config and "subset.key=h1" in lb.config
    lb.update(invokers(12))
    members = in_subset(lb)
    assert len(members) == 3
    seen: Counter[int] = Counter()
    for _ in range(PICKS):
        picked = lb.select()
        lb.report(picked, 1_000, Outcome.SUCCESS)
        seen[picked] += 1
    assert set(seen) == members, f"picks {dict(seen)} outside or short of the subset {members}"
    if strategy == "p2c":
        # Equal weights: each member gets a third. 5 binomial standard deviations (~129 of 1000).
        p = 1 / 3
        tolerance = 5 * math.sqrt(PICKS * p * (1 - p))
        for count in seen.values():
            assert abs(count - PICKS * p) <= tolerance, dict(seen)


def subset_addresses(key: str, invoker_list: List[Invoker], size: int = 3) -> Set[str]:
    with polylb.Balancer(config=f"loadbalance=leastactive&subset.size={size}&subset.key={key}") as lb:
        lb.update(invoker_list)
        members = in_subset(lb)
        by_id = {inv.id: str(inv.address) for inv in invoker_list}
        return {by_id[i] for i in members}


def test_the_subset_is_the_key_and_the_addresses_not_the_ids_or_order() -> None:
    base = invokers(12)
    chosen = subset_addresses("h1", base)
    assert len(chosen) == 3
    # Another balancer, same key and set: the same subset.
    assert subset_addresses("h1", base) == chosen
    # The same addresses under other ids, in reverse order: the same addresses.
    renamed = [Invoker(5000 + i, f"10.0.0.{i}:20880") for i in range(12, 0, -1)]
    assert subset_addresses("h1", renamed) == chosen
    # Another key (h2: a fixed key known to give another subset of these 12 addresses).
    other = subset_addresses("h2", base)
    assert len(other) == 3
    assert other != chosen


def test_a_failover_stays_in_the_subset_until_its_members_are_excluded(balancer_factory: Any) -> None:
    lb = balancer_factory("leastactive", subset_size=3, subset_key="h1", seed=5)
    lb.update(invokers(12))
    members = sorted(in_subset(lb))
    everyone = list(range(1, 13))
    for trial in range(200):
        tried: List[int] = []
        # Rotate which member is excluded first.
        order = members[trial % 3 :] + members[: trial % 3]
        for member in order:
            tried.append(member)
            for among in (None, everyone):
                picked = lb.select(among=among, exclude=tried)
                lb.report(picked, 1_000, Outcome.SUCCESS)
                assert picked not in tried
                if len(tried) < len(members):
                    assert picked in members, f"left the subset with {tried} excluded: {picked}"
                else:
                    assert picked not in members, f"all members excluded, yet picked {picked}"
    # Candidates holding a single member stay on it; holding none, the pick spills over.
    only = members[0]
    outsiders = [i for i in everyone if i not in members]
    for _ in range(50):
        assert lb.select(among=[only] + outsiders) == only
        lb.report(only, 1_000, Outcome.SUCCESS)
        picked = lb.select(among=outsiders)
        assert picked in outsiders
        lb.report(picked, 1_000, Outcome.SUCCESS)


@pytest.mark.parametrize(
    "config, names",
    [
        ("loadbalance=maglev&subset.size=3&subset.key=a", "subset.size"),
        ("loadbalance=rendezvous&subset.size=3&subset.key=a", "subset.size"),
        ("loadbalance=consistenthash&subset.size=3&subset.key=a", "subset.size"),
        ("loadbalance=random&subset.size=3&subset.key=a", "subset.size"),
        ("loadbalance=roundrobin&subset.size=3&subset.key=a", "subset.size"),
        ("loadbalance=orca&subset.size=3&subset.key=a", "subset.size"),
        ("loadbalance=leastactive&subset.size=3", "subset.key"),
        ("loadbalance=leastactive&subset.key=a", "subset.key"),
        ("loadbalance=leastactive&subset.size=3&subset.key=a&subset.minHealthyPercent=50", "subset.minHealthyPercent"),
    ],
)
def test_rejected_configs_raise_config_error_naming_the_key(config: str, names: str) -> None:
    assert_config_error_naming(config, names)


def test_rejected_keyword_config_raises_config_error() -> None:
    with pytest.raises(polylb.ConfigError) as info:
        polylb.Balancer("maglev", subset_size=3, subset_key="a")
    assert "subset.size" in info.value.message


# The subset every language must agree on: invokers 1..20 at 10.0.0.<id>:20880 with
# loadbalance=leastactive&subset.size=4&subset.key=consumer-42 (same key + addresses -> same subset in
# Rust, C, Java, Go and Python). Computed once from the Rust library; the Java and Go tests
# assert the same literal.
CROSS_LANGUAGE_SUBSET = {6, 11, 15, 18}


def test_the_cross_language_subset() -> None:
    with polylb.Balancer(config="loadbalance=leastactive&subset.size=4&subset.key=consumer-42") as lb:
        lb.update([Invoker(i, f"10.0.0.{i}:20880") for i in range(1, 21)])
        assert in_subset(lb) == CROSS_LANGUAGE_SUBSET


# The subsets dealt by index every language must agree on: invokers 1..20 at 10.0.0.<id>:20880
# (default weight) with loadbalance=random&subset.size=4&subset.index=<i>. Computed once from the
# Rust library; the Java (SubsetTest) and Go (subset_test.go) tests assert the same literal, and
# they must agree.
CROSS_LANGUAGE_INDEXED_SUBSETS = {0: {5, 7, 11, 14}, 1: {4, 10, 12, 17}, 7: {2, 4, 7, 11}}


def indexed_subset(index: int, size: int = 4, n: int = 20, strategy: str = "random") -> Set[int]:
    # Keywords: subset_index=7 is subset.index=7.
    with polylb.Balancer(strategy, subset_size=size, subset_index=index) as lb:
        assert f"subset.size={size}" in lb.config and f"subset.index={index}" in lb.config
        lb.update([Invoker(i, f"10.0.0.{i}:20880") for i in range(1, n + 1)])
        return in_subset(lb)


def test_the_cross_language_subsets_by_index() -> None:
    got = {index: indexed_subset(index) for index in CROSS_LANGUAGE_INDEXED_SUBSETS}
    assert got == CROSS_LANGUAGE_INDEXED_SUBSETS


def test_subsets_by_index_hold_every_invoker_equally_often() -> None:
    # 25 consumers x 4 places = 100 places over 20 invokers: each invoker in exactly 5 subsets.
    held: Counter[int] = Counter()
    for index in range(25):
        members = indexed_subset(index)
        assert len(members) == 4, f"consumer {index}: {members}"
        held.update(members)
    assert held == Counter({i: 5 for i in range(1, 21)}), dict(held)


@pytest.mark.parametrize("strategy", ["random", "roundrobin", "orca"])
def test_load_blind_strategies_take_subsets_by_index(strategy: str, balancer_factory: Any) -> None:
    lb = balancer_factory(strategy, subset_size=4, subset_index=5, seed=1)
    lb.update(invokers(12))
    members = in_subset(lb)
    assert len(members) == 4
    assert members == indexed_subset(5, n=12, strategy="leastactive"), "the index, not the strategy"
    seen: Counter[int] = Counter()
    for _ in range(2000):
        picked = lb.select()
        lb.report(picked, 1_000, Outcome.SUCCESS)
        assert picked in members, f"{strategy}: picked {picked} outside the subset {members}"
        seen[picked] += 1
    assert set(seen) == members, f"{strategy}: picks {dict(seen)} short of the subset {members}"


@pytest.mark.parametrize(
    "config, names",
    [
        ("loadbalance=random&subset.size=3&subset.key=a", "subset.size"),
        ("loadbalance=leastactive&subset.size=3&subset.key=a&subset.index=1", "subset.index"),
        ("loadbalance=random&subset.size=3&subset.key=a&subset.index=1", "subset.index"),
        ("loadbalance=maglev&subset.size=3&subset.index=1", "subset.size"),
        ("loadbalance=random&subset.index=1", "subset.index"),
        ("loadbalance=random&subset.size=3&subset.index=-1", "subset.index"),
        ("loadbalance=random&subset.size=3&subset.index=4294967296", "subset.index"),
    ],
)
def test_rejected_index_configs_raise_config_error_naming_the_key(config: str, names: str) -> None:
    assert_config_error_naming(config, names)


def test_the_largest_index_is_accepted() -> None:
    assert len(indexed_subset(4294967295)) == 4


def test_rejected_index_keywords_raise_config_error() -> None:
    with pytest.raises(polylb.ConfigError) as info:
        polylb.Balancer("random", subset_size=3, subset_key="a", subset_index=1)
    assert "subset.index" in info.value.message
    with pytest.raises(polylb.ConfigError) as info:
        polylb.Balancer("maglev", subset_size=3, subset_index=1)
    assert "subset.size" in info.value.message
