"""polylb's ``rendezvous`` strategy driven through Python: every pick is the score the strategy's
module doc specifies (conftest's reference, written from the doc, not taken from the library),
keys spread in proportion to weight, churn moves only the keys it must, and a failover's retry is
the key's next choice, which a consumer without the failed invoker picks too."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, List, Sequence, Union

import pytest

import polylb
from conftest import assert_config_error_naming, invokers, rendezvous_reference
from polylb import Invoker, Outcome

KEYS = [f"user-{i}" for i in range(2000)]

# The cross-language contract: invokers 1..8 at 10.0.0.<id>:20880, weight 100 each, key
# "user-<i>" as UTF-8 -> this id. Computed once from the Rust library; the Java (RendezvousTest)
# and Go (rendezvous_test.go) tests assert the same literal, and all must agree.
CROSS_LANGUAGE_PICKS = [2, 6, 7, 2, 1, 6, 8, 3, 8, 3]


def assert_binomial(count: int, draws: int, share: float, label: str) -> None:
    """``count`` of ``draws`` within 5 standard deviations of Binomial(draws, share)."""
    sigma = math.sqrt(draws * share * (1 - share))
    assert abs(count - draws * share) <= 5 * sigma, f"{label}: {count} of {draws}, expected share {share}"


def picks(lb: polylb.Balancer, keys: Sequence[Union[str, bytes]], **kwargs: Any) -> List[int]:
    chosen = []
    for key in keys:
        with lb.call(key=key, **kwargs) as call:
            chosen.append(call.id)
    return chosen


def test_the_cross_language_picks(balancer_factory: Any) -> None:
    lb = balancer_factory("rendezvous")
    lb.update(invokers(8))
    keys = [f"user-{i}" for i in range(10)]
    assert picks(lb, keys) == CROSS_LANGUAGE_PICKS
    owner = rendezvous_reference(invokers(8))
    assert [owner(key) for key in keys] == CROSS_LANGUAGE_PICKS
    assert lb.stats()["strategy"] == "rendezvous"


@pytest.mark.parametrize(
    "weights",
    [
        [100, 300, 0, 50],  # unequal, one of them 0: the logarithm decides
        [7, 7, 7, 7],  # equal: the library's shortcut must pick what the formula picks
        [0, 0, 0, 0],  # all 0: all count as equal
    ],
)
def test_picks_are_the_documented_scores(weights: List[int], balancer_factory: Any) -> None:
    # Addresses not in id order, so neither ids nor addresses' order can stand in for the score.
    members = [
        Invoker(1, "10.0.0.9:20880", weight=weights[0]),
        Invoker(2, "10.0.0.1:20880", weight=weights[1]),
        Invoker(3, "10.0.0.5:20880", weight=weights[2]),
        Invoker(4, "10.0.0.3:20880", weight=weights[3]),
    ]
    lb = balancer_factory("rendezvous")
    lb.update(members)
    owner = rendezvous_reference(members)
    chosen = picks(lb, KEYS)
    assert chosen == [owner(key) for key in KEYS]
    if 0 in weights and any(weights):
        assert weights.index(0) + 1 not in chosen  # weight 0 takes no key while others weigh more
    # Bytes are hashed as they are, str as its UTF-8 encoding.
    assert picks(lb, [key.encode() for key in KEYS[:100]]) == chosen[:100]
    assert lb.select(key="ключ-é") == owner("ключ-é")
    lb.report(owner("ключ-é"), 1, Outcome.SUCCESS)
    # Among some candidates: the best of them by the same scores, weight 0 included.
    everyone = {1, 2, 3, 4}
    for key in KEYS[:300]:
        for excluded in ([owner(key)], [owner(key), 2], [1, 2, 4]):
            assert lb.select(key=key, exclude=excluded) == owner(key, everyone - set(excluded)), (key, excluded)
            lb.report(owner(key, everyone - set(excluded)), 1, Outcome.SUCCESS)


def test_keys_spread_in_proportion_to_weight(balancer_factory: Any) -> None:
    lb = balancer_factory("rendezvous")
    lb.update(invokers(4, weights=[100, 200, 300, 400]))
    keys = [f"user-{i}" for i in range(20000)]
    counts = Counter(picks(lb, keys))
    for invoker_id, share in ((1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)):
        assert_binomial(counts[invoker_id], len(keys), share, f"id {invoker_id}")
    # A weight of 1 beside 99 keeps its 1 %: nothing rounds it away.
    lb.update(invokers(2, weights=[99, 1]))
    assert_binomial(Counter(picks(lb, keys))[2], len(keys), 0.01, "weight 1 of 100")


def test_keys_follow_addresses_not_ids_or_order(balancer_factory: Any) -> None:
    set_a = invokers(6, weights=[100, 200, 100, 300, 100, 100])
    a = balancer_factory("rendezvous")
    a.update(set_a)
    b = balancer_factory("rendezvous", seed=9)
    b.update([Invoker(i.id + 100, i.address, weight=i.weight) for i in reversed(set_a)])
    assert [p + 100 for p in picks(a, KEYS)] == picks(b, KEYS)


def test_churn_moves_only_the_keys_it_must(balancer_factory: Any) -> None:
    full = invokers(10)
    lb = balancer_factory("rendezvous")
    lb.update(full)
    before = picks(lb, KEYS)
    # Invoker 4 leaves: exactly its keys move, spread over the others.
    lb.update([i for i in full if i.id != 4])
    after = picks(lb, KEYS)
    for key, was, now in zip(KEYS, before, after):
        if was == 4:
            assert now != 4, key
        else:
            assert now == was, f"{key} moved from {was} to {now} though its invoker stayed"
    assert len({now for was, now in zip(before, after) if was == 4}) == 9
    # It comes back: its keys return.
    lb.update(full)
    assert picks(lb, KEYS) == before
    # A newcomer takes keys only for itself, about its share.
    lb.update(full + [Invoker(11, "10.0.0.11:20880")])
    grown = picks(lb, KEYS)
    assert all(now in (was, 11) for was, now in zip(before, grown))
    assert_binomial(grown.count(11), len(KEYS), 1 / 11, "the newcomer's keys")


def test_a_failover_takes_the_keys_next_choice_shared_by_every_consumer(balancer_factory: Any) -> None:
    full = invokers(6, weights=[120, 140, 160, 180, 200, 220])
    lb = balancer_factory("rendezvous")
    lb.update(full)
    others = {}  # a consumer that was told of the set without the failed invoker
    for dropped in range(1, 7):
        other = balancer_factory("rendezvous")
        other.update([i for i in full if i.id != dropped])
        others[dropped] = other
    for key in KEYS[:500]:
        first = lb.select(key=key)
        lb.report(first, 1_000, Outcome.FAILURE)
        retry = lb.select(key=key, exclude=[first])
        lb.report(retry, 1_000, Outcome.SUCCESS)
        assert retry != first
        expected = others[first].select(key=key)
        others[first].report(expected, 1, Outcome.SUCCESS)
        assert retry == expected, key
        # Excluding a bystander leaves the key where it was.
        bystander = first % 6 + 1
        assert lb.select(key=key, exclude=[bystander]) == first
        lb.report(first, 1_000, Outcome.SUCCESS)
    assert all(row["active"] == 0 for row in lb.stats()["invokers"])


@pytest.mark.parametrize(
    "config, names",
    [
        ("loadbalance=rendezvous&subset.size=3&subset.key=a", "subset"),
        ("loadbalance=rendezvous&slowstart.windowMs=1000", "slowstart"),
        ("loadbalance=rendezvous&maglev.tableSize=101", "maglev"),
    ],
)
def test_options_it_cannot_honour_are_refused(config: str, names: str) -> None:
    assert_config_error_naming(config, names)


def test_rendezvous_needs_addresses(balancer_factory: Any) -> None:
    lb = balancer_factory("rendezvous")
    lb.update(invokers(2))
    before = picks(lb, KEYS[:100])
    with pytest.raises(polylb.InvalidArgumentError, match="address is empty") as info:
        lb.update([Invoker(1, "10.0.0.1:20880"), Invoker(2, "")])
    assert info.value.status == polylb.Status.INVALID_ARGUMENT
    assert [row["id"] for row in lb.stats()["invokers"]] == [1, 2]
    assert picks(lb, KEYS[:100]) == before
