"""polylb's ``maglev`` strategy driven through Python: the key reaches the library as it should
(str as UTF-8), picks are the table the strategy documents, failover keeps other keys in place,
and ``maglev.tableSize`` errors come back as the documented exceptions. The table's fine detail
is tested in Rust."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Dict, Set

import pytest

import polylb
from conftest import invokers, maglev_reference
from polylb import Invoker, Outcome

KEYS = [f"user-{i}" for i in range(2000)]


def test_maglev_selects_reports_and_names_itself(balancer_factory: Any) -> None:
    lb = balancer_factory("maglev")
    lb.update(invokers(4))
    seen: Counter = Counter()
    for key in KEYS[:400]:
        with lb.call(key=key) as call:
            seen[call.id] += 1
    assert set(seen) == {1, 2, 3, 4}  # distinct keys spread over every invoker
    stats = lb.stats()
    assert stats["strategy"] == "maglev"
    assert sum(row["selected"] for row in stats["invokers"]) == 400
    assert all(row["active"] == 0 for row in stats["invokers"])


@pytest.mark.parametrize("table_size", [257, 65537])
def test_maglev_picks_are_the_documented_table(table_size: int, balancer_factory: Any) -> None:
    # Unequal weights, one of them 0, and addresses not in id order: the reference (conftest,
    # written from the module doc, not by the library) must agree key for key.
    members = [
        Invoker(1, "10.0.0.9:20880", weight=100),
        Invoker(2, "10.0.0.1:20880", weight=300),
        Invoker(3, "10.0.0.5:20880", weight=0),
        Invoker(4, "10.0.0.3:20880", weight=50),
    ]
    lb = balancer_factory("maglev", maglev_tableSize=table_size)
    lb.update(members)
    owner = maglev_reference(members, table_size)
    assert Counter(owner.slots)[3] == 0  # weight 0 owns no slot
    picks = [lb.select(key=key) for key in KEYS]
    assert picks == [owner(key) for key in KEYS]
    assert 3 not in picks
    # Bytes are hashed as they are, str as its UTF-8 encoding.
    assert [lb.select(key=key.encode()) for key in KEYS[:100]] == picks[:100]
    assert lb.select(key="ключ-é") == owner("ключ-é")
    # Excluding the key's owner: the next slot a candidate owns.
    for key in KEYS[:300]:
        first = owner(key)
        assert lb.select(key=key, exclude=[first]) == owner(key, {1, 2, 4} - {first})


def test_maglev_is_sticky_weighted_and_independent_of_order(balancer_factory: Any) -> None:
    lb = balancer_factory("maglev")
    lb.update(invokers(3, weights=[100, 100, 200]))
    reversed_set = balancer_factory("maglev")
    reversed_set.update(list(reversed(invokers(3, weights=[100, 100, 200]))))
    keys = [f"user-{i}" for i in range(20000)]
    picks = [lb.select(key=key) for key in keys]
    assert [lb.select(key=key) for key in keys[:500]] == picks[:500]  # same key, same invoker
    assert [reversed_set.select(key=key) for key in keys[::10]] == picks[::10]
    counts = Counter(picks)
    # Each share within 5 sigma of the binomial at the weight's share (the table's own shares
    # are within 1 % of the weights' at 65537 slots).
    for invoker_id, share in ((1, 0.25), (2, 0.25), (3, 0.5)):
        sigma = math.sqrt(len(keys) * share * (1 - share))
        assert abs(counts[invoker_id] - len(keys) * share) <= 5 * sigma, counts


def test_maglev_failover_moves_only_the_excluded_invokers_keys(balancer_factory: Any) -> None:
    lb = balancer_factory("maglev")
    lb.update(invokers(4))
    owners = {key: lb.select(key=key) for key in KEYS}
    failover_targets: Dict[int, Set[int]] = {}
    for key, first in owners.items():
        other = lb.select(key=key, exclude=[first])
        assert other != first and other in (1, 2, 3, 4)
        assert lb.select(key=key, exclude=[first]) == other  # the same every time
        failover_targets.setdefault(first, set()).add(other)
        for excluded in {1, 2, 3, 4} - {first}:  # keys of the candidates do not move
            assert lb.select(key=key, exclude=[excluded]) == first
        assert lb.select(key=key, among=[first, first % 4 + 1]) == first
    assert set(failover_targets) == {1, 2, 3, 4}
    assert all(len(targets) >= 2 for targets in failover_targets.values()), failover_targets
    # A call block does the same as select.
    key = KEYS[0]
    with lb.call(key=key, exclude=[owners[key]]) as call:
        assert call.id == lb.select(key=key, exclude=[owners[key]])
        lb.report(call.id, 100, Outcome.SUCCESS)


def test_maglev_removal_moves_its_keys_and_few_others(balancer_factory: Any) -> None:
    lb = balancer_factory("maglev")
    lb.update(invokers(5))
    before = {key: lb.select(key=key) for key in KEYS}
    lb.update([invoker for invoker in invokers(5) if invoker.id != 3])
    after = {key: lb.select(key=key) for key in KEYS}
    assert 3 not in after.values()
    others = [key for key in KEYS if before[key] != 3]
    moved = [key for key in others if after[key] != before[key]]
    assert len(moved) < len(others) / 10, f"{len(moved)} of {len(others)} keys of the others moved"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"maglev_tableSize": 65536}, "config: maglev.tableSize='65536' is not a prime"),
        ({"maglev_tableSize": 5}, "config: maglev.tableSize='5' is out of range (accepted: a prime in 7..=16777213)"),
        ({"maglev_tableSize": 16777259}, "config: maglev.tableSize='16777259' is out of range (accepted: a prime in 7..=16777213)"),
        ({"slowstart_windowMs": 60000}, "slowstart.windowMs"),
        ({"maglev_table_size": 257}, "did you mean 'maglev.tableSize'"),  # keywords keep the key's case
    ],
)
def test_maglev_config_errors(params: Any, message: str) -> None:
    with pytest.raises(polylb.ConfigError) as e:
        polylb.Balancer("maglev", **params)
    assert message in str(e.value)


def test_maglev_table_size_only_with_maglev() -> None:
    with pytest.raises(polylb.ConfigError, match="maglev.tableSize"):
        polylb.Balancer("consistenthash", maglev_tableSize=65537)


def test_maglev_set_larger_than_the_table_keeps_the_previous_set(balancer_factory: Any) -> None:
    lb = balancer_factory("maglev", maglev_tableSize=7)
    assert lb.config == "loadbalance=maglev&maglev.tableSize=7"
    lb.update(invokers(7))  # 7 fit, one slot each
    before = [lb.select(key=key) for key in KEYS[:700]]
    assert set(before) == set(range(1, 8))
    with pytest.raises(polylb.LimitExceededError, match="maglev.tableSize") as e:
        lb.update(invokers(8))
    assert e.value.status == polylb.Status.LIMIT_EXCEEDED
    assert [row["id"] for row in lb.stats()["invokers"]] == list(range(1, 8))
    assert [lb.select(key=key) for key in KEYS[:700]] == before


def test_maglev_needs_addresses(balancer_factory: Any) -> None:
    lb = balancer_factory("maglev")
    lb.update(invokers(2))
    with pytest.raises(polylb.InvalidArgumentError, match="address is empty"):
        lb.update([Invoker(1, "10.0.0.1:20880"), Invoker(2, "")])
    assert [row["id"] for row in lb.stats()["invokers"]] == [1, 2]
