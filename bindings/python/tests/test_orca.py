"""polylb's ``orca`` strategy driven through Python: providers' load reports
(:meth:`polylb.Balancer.report_load`, gRFC A58's qps, eps and utilization) deal the calls after
the blackout, in the deterministic stride order every language must agree on; bad reports raise
and change nothing; reports for ids not in the set and under other strategies are accepted and
ignored; a failover draws among the others by the same weights; threads report loads while the
set changes.

The strategy's fine detail (expiration, the cap, warm-up, churn) is tested in Rust
(tests/beyond_dubbo/orca.rs); these check that the binding carries the reports unchanged.
"""

from __future__ import annotations

import math
import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

import polylb
from conftest import assert_config_error_naming, by_id, invokers
from polylb import Invoker, Outcome, Status

NOW_US = 1_700_000_000_000_000
SECOND_US = 1_000_000

# The cross-language contract: invokers 1..4 at 10.0.0.<id>:20880 (default weight) with
# loadbalance=orca&orca.blackoutMs=0, every call at NOW_US; loads (qps, eps, utilization)
# 1: (100, 0, 0.5), 2: (100, 0, 0.25), 3: (100, 50, 0.5), none for 4. Capacities 200, 400 and
# 100 (half of 3's calls fail), 4 the mean, 233.3. Computed from the Rust library
# (tests/beyond_dubbo/orca.rs, the_cross_language_sequence); the Java and Go tests assert the
# same literals, and all must agree.
CROSS_LANGUAGE_LOADS = {1: (100.0, 0.0, 0.5), 2: (100.0, 0.0, 0.25), 3: (100.0, 50.0, 0.5)}
CROSS_LANGUAGE_PICKS = [2, 4, 1, 2, 4, 2, 1, 2, 3, 4, 2, 1]
CROSS_LANGUAGE_COUNTS = {1: 257, 2: 515, 3: 128, 4: 300}


def deal(
    lb: polylb.Balancer, draws: int, now_us: int, method: Any = 0, exclude: Optional[Sequence[int]] = None
) -> Counter:
    """Picks per id over ``draws`` select + report (success, 1000 µs) at ``now_us``."""
    seen: Counter = Counter()
    for _ in range(draws):
        picked = lb.select(method=method, exclude=exclude, now_us=now_us)
        lb.report(picked, 1_000, Outcome.SUCCESS, method=method, now_us=now_us)
        seen[picked] += 1
    return seen


def assert_dealt(seen: Counter, weights: Dict[int, float], draws: int) -> None:
    """The stride schedule deals each invoker its share within every round, not at random: each
    count is within 2 of ``draws × weight / total``."""
    total = sum(weights.values())
    for invoker_id, weight in weights.items():
        expected = draws * weight / total
        assert abs(seen[invoker_id] - expected) <= 2, (
            f"invoker {invoker_id}: {seen[invoker_id]} calls, expected {expected:.1f} "
            f"(weights {weights}, dealt {dict(seen)})"
        )


def report_every_second(
    lb: polylb.Balancer, loads: Dict[int, Tuple[float, float, float]], start_us: int, end_us: int
) -> None:
    """Each id of ``loads`` reports its load every second from ``start_us`` to ``end_us``."""
    for now_us in range(start_us, end_us + 1, SECOND_US):
        for invoker_id, (qps, eps, utilization) in loads.items():
            lb.report_load(invoker_id, qps, eps, utilization, now_us=now_us)


def orca_fields(lb: polylb.Balancer, now_us: int = NOW_US) -> Dict[int, Tuple[Any, ...]]:
    return {
        row["id"]: (row["orca_weight"], row["orca_counted"], row["orca_reported"], row["orca_share"])
        for row in lb.stats(now_us=now_us)["invokers"]
    }


# -- the contract every language asserts --------------------------------------------------------


def cross_language_balancer(make: Any, **spelling: Any) -> polylb.Balancer:
    lb: polylb.Balancer = make(**spelling)
    lb.update(invokers(4))
    for invoker_id, (qps, eps, utilization) in CROSS_LANGUAGE_LOADS.items():
        lb.report_load(invoker_id, qps, eps, utilization, now_us=NOW_US)
    return lb


@pytest.mark.parametrize(
    "spelling",
    [
        {"config": "loadbalance=orca&orca.blackoutMs=0"},
        {"loadbalance": "orca", "orca_blackoutMs": 0},  # keywords: orca_blackoutMs is orca.blackoutMs
    ],
    ids=["config", "keywords"],
)
def test_the_cross_language_sequence(spelling: Dict[str, Any], balancer_factory: Any) -> None:
    lb = cross_language_balancer(balancer_factory, **spelling)
    assert lb.config == "loadbalance=orca&orca.blackoutMs=0"
    picks = []
    for _ in range(12):
        picked = lb.select(now_us=NOW_US)
        lb.report(picked, 1_000, Outcome.SUCCESS, now_us=NOW_US)
        picks.append(picked)
    assert picks == CROSS_LANGUAGE_PICKS
    seen = deal(lb, 1188, NOW_US) + Counter(picks)
    assert dict(seen) == CROSS_LANGUAGE_COUNTS
    assert_dealt(seen, {1: 200, 2: 400, 3: 100, 4: 700 / 3}, 1200)
    stats = lb.stats(now_us=NOW_US)
    assert stats["strategy"] == "orca"
    assert all(row["active"] == 0 for row in stats["invokers"])
    assert [row["selected"] for row in stats["invokers"]] == [CROSS_LANGUAGE_COUNTS[i] for i in (1, 2, 3, 4)]


def test_the_sequence_does_not_depend_on_the_seed_or_the_clock_reading_calls(balancer_factory: Any) -> None:
    # The stride schedule draws nothing at random: a seed changes nothing, and so do stats reads.
    lb = cross_language_balancer(balancer_factory, config="loadbalance=orca&orca.blackoutMs=0&seed=99")
    lb.stats(now_us=NOW_US)
    assert [lb.select(now_us=NOW_US) for _ in range(12)] == CROSS_LANGUAGE_PICKS


# -- weights from reports -----------------------------------------------------------------------


def test_shares_follow_reported_capacity_after_the_blackout_and_not_before(balancer_factory: Any) -> None:
    lb = balancer_factory("orca", orca_blackoutMs=10_000)
    lb.update(invokers(4))
    # The same qps at different utilizations: capacities 200, 200, 400, 100.
    loads = {1: (100.0, 0.0, 0.5), 2: (100.0, 0.0, 0.5), 3: (100.0, 0.0, 0.25), 4: (100.0, 0.0, 1.0)}
    report_every_second(lb, loads, NOW_US, NOW_US + 9 * SECOND_US)
    # 9.5 s after the first report: still in the blackout, the configured (equal) weights deal.
    during = NOW_US + 9_500_000
    assert_dealt(deal(lb, 4000, during), {1: 1, 2: 1, 3: 1, 4: 1}, 4000)
    fields = orca_fields(lb, during)
    assert fields[3][:3] == (400, False, False)  # reported, not counted yet
    assert all(share == pytest.approx(0.25) for _, _, _, share in fields.values())
    report_every_second(lb, loads, NOW_US + 10 * SECOND_US, NOW_US + 12 * SECOND_US)
    # Past 10 s the weights count, from the next recomputation (orca.updateMs, 1 s, has passed).
    after = NOW_US + 12 * SECOND_US
    assert_dealt(deal(lb, 9000, after), {1: 200, 2: 200, 3: 400, 4: 100}, 9000)
    fields = orca_fields(lb, after)
    assert fields[3][:3] == (400, True, True)
    for invoker_id, capacity in ((1, 200), (2, 200), (3, 400), (4, 100)):
        assert fields[invoker_id][3] == pytest.approx(capacity / 900, abs=1e-4), invoker_id


@pytest.mark.parametrize("penalty, expected", [(1.0, 100), (0.0, 200), (3.0, 50)])
def test_errors_weigh_by_the_penalty(penalty: float, expected: float, balancer_factory: Any) -> None:
    lb = balancer_factory("orca", orca_blackoutMs=0, orca_errorPenalty=penalty)
    assert f"orca.errorPenalty={penalty}" in lb.config
    lb.update(invokers(2))
    # 100 qps at 0.5 is 200; half of them failing adds 0.5 × penalty to the utilization.
    lb.report_load(1, 100, 50, 0.5, now_us=NOW_US)
    lb.report_load(2, 100, 0, 0.5, now_us=NOW_US)
    assert orca_fields(lb)[1][0] == expected
    assert_dealt(deal(lb, 3000, NOW_US), {1: expected, 2: 200}, 3000)


def test_an_invoker_without_a_report_takes_the_mean(balancer_factory: Any) -> None:
    lb = balancer_factory("orca", orca_blackoutMs=0)
    lb.update(invokers(4))
    for invoker_id, qps in ((1, 100), (2, 200), (3, 300)):
        lb.report_load(invoker_id, qps, 0, 1.0, now_us=NOW_US)
    assert orca_fields(lb)[4][:2] == (None, False)
    assert_dealt(deal(lb, 8000, NOW_US), {1: 100, 2: 200, 3: 300, 4: 200}, 8000)


def test_fewer_than_two_weights_leave_the_configured_weights_in_charge(balancer_factory: Any) -> None:
    lb = balancer_factory("orca", orca_blackoutMs=0)
    lb.update(invokers(2, weights=[100, 300]))
    lb.report_load(1, 1000, 0, 0.1, now_us=NOW_US)  # one weight is no comparison
    assert_dealt(deal(lb, 4000, NOW_US), {1: 100, 2: 300}, 4000)
    assert orca_fields(lb)[1][:3] == (10_000, True, False)
    lb.report_load(2, 1000, 0, 0.1, now_us=NOW_US)  # a second weight: the reports deal
    later = NOW_US + SECOND_US
    assert_dealt(deal(lb, 4000, later), {1: 1, 2: 1}, 4000)
    assert orca_fields(lb, later)[1][2] is True


def test_reports_without_qps_or_utilization_are_ignored(balancer_factory: Any) -> None:
    lb = balancer_factory("orca", orca_blackoutMs=0)
    lb.update(invokers(2))
    lb.report_load(1, 100, 0, 1.0, now_us=NOW_US)
    lb.report_load(2, 300, 0, 1.0, now_us=NOW_US)
    lb.report_load(2, 0, 0, 0.0, now_us=NOW_US + 1)  # an idle provider's report
    lb.report_load(2, 50, 0, 0.0, now_us=NOW_US + 2)  # no utilization
    assert orca_fields(lb)[2][0] == 300
    assert_dealt(deal(lb, 4000, NOW_US + 3), {1: 1, 2: 3}, 4000)


def test_reports_are_per_invoker_not_per_method(balancer_factory: Any) -> None:
    lb = balancer_factory("orca", orca_blackoutMs=0)
    lb.update(invokers(2))
    lb.report_load(1, 100, 0, 1.0, now_us=NOW_US)
    lb.report_load(2, 300, 0, 1.0, now_us=NOW_US)
    for method in ("get", "put", lb.method("put")):
        assert_dealt(deal(lb, 4000, NOW_US, method=method), {1: 1, 2: 3}, 4000)


def test_the_library_clock_is_used_without_now_us(balancer_factory: Any) -> None:
    lb = balancer_factory("orca", orca_blackoutMs=0)
    lb.update(invokers(2))
    lb.report_load(1, 100, 0, 1.0)
    lb.report_load(2, 300, 0, 1.0)
    fields = orca_fields(lb, 0)
    assert (fields[1][:2], fields[2][:2]) == ((100, True), (300, True))
    # Reported now (the library's clock): at NOW_US, in 2023, they had not been made.
    assert orca_fields(lb, NOW_US)[1][1] is False
    seen = Counter(lb.select() for _ in range(4000))
    assert_dealt(seen, {1: 1, 2: 3}, 4000)


# -- bad reports, ids not in the set, other strategies -----------------------------------------


@pytest.fixture
def reported(balancer_factory: Any) -> polylb.Balancer:
    """orca over ids 1..3 (blackout 0), 1 and 2 reported (weights 100 and 300), 3 not."""
    lb: polylb.Balancer = balancer_factory("orca", orca_blackoutMs=0)
    lb.update(invokers(3))
    lb.report_load(1, 100, 0, 1.0, now_us=NOW_US)
    lb.report_load(2, 300, 0, 1.0, now_us=NOW_US)
    return lb


BAD_LOADS = [
    ((math.nan, 0, 1.0), "qps = nan"),
    ((100, math.nan, 1.0), "eps = nan"),
    ((100, 0, math.nan), "utilization = nan"),
    ((math.inf, 0, 1.0), "qps = inf"),
    ((100, 0, math.inf), "utilization = inf"),
    ((100, -math.inf, 1.0), "eps = -inf"),
    ((-1, 0, 1.0), "qps = -1"),
    ((100, -1.0, 1.0), "eps = -1.0"),
    ((100, 0, -0.5), "utilization = -0.5"),
    ((100, 101, 1.0), "eps = 101 is above qps = 100"),
    ((0, 1e-9, 0), "eps = 1e-09 is above qps = 0"),
]


@pytest.mark.parametrize("invoker_id", [2, 3])
@pytest.mark.parametrize("load, named", BAD_LOADS, ids=[named for _, named in BAD_LOADS])
def test_bad_reports_raise_and_change_nothing(
    reported: polylb.Balancer, invoker_id: int, load: Tuple[float, float, float], named: str
) -> None:
    before = reported.stats(now_us=NOW_US)
    with pytest.raises(polylb.InvalidArgumentError) as info:
        reported.report_load(invoker_id, *load, now_us=NOW_US)
    assert info.value.status is Status.INVALID_ARGUMENT
    assert isinstance(info.value, ValueError)
    assert named in info.value.message, info.value.message
    # Also when the first report of an invoker (3) is refused: its weight stays null.
    assert reported.stats(now_us=NOW_US) == before
    with pytest.raises(polylb.InvalidArgumentError):
        reported.report_load(invoker_id, *load)  # the library's clock: refused all the same
    assert reported.stats(now_us=NOW_US) == before
    assert_dealt(deal(reported, 3000, NOW_US), {1: 100, 2: 300, 3: 200}, 3000)


@pytest.mark.parametrize(
    "arguments, parameter",
    [
        ((1, "100", 0, 1.0), "qps"),
        ((1, 100, None, 1.0), "eps"),
        ((1, 100, 0, [1.0]), "utilization"),
        ((1, 100, 0, b"1"), "utilization"),
        ((1.0, 100, 0, 1.0), "id"),
        (("1", 100, 0, 1.0), "id"),
    ],
)
def test_wrong_types_are_type_errors_naming_the_parameter(
    reported: polylb.Balancer, arguments: Tuple[Any, ...], parameter: str
) -> None:
    before = reported.stats(now_us=NOW_US)
    with pytest.raises(TypeError, match=f"^{parameter}: "):
        reported.report_load(*arguments, now_us=NOW_US)
    with pytest.raises(TypeError, match="now_us"):
        reported.report_load(1, 100, 0, 1.0, now_us=1.5)  # type: ignore[arg-type]
    assert reported.stats(now_us=NOW_US) == before


def test_ints_and_numbers_with_a_float_value_are_accepted(reported: polylb.Balancer) -> None:
    from decimal import Decimal
    from fractions import Fraction

    reported.report_load(3, 100, 0, Fraction(1, 2), now_us=NOW_US)
    assert orca_fields(reported)[3][0] == 200
    reported.report_load(3, Decimal("150"), 0, 0.5, now_us=NOW_US)
    assert orca_fields(reported)[3][0] == 300


def test_a_clock_beyond_64_bits_is_invalid_and_named(reported: polylb.Balancer) -> None:
    before = reported.stats(now_us=NOW_US)
    for now_us in (2**63, -(2**63) - 1, 2**64 + NOW_US):
        with pytest.raises(polylb.InvalidArgumentError) as info:
            reported.report_load(3, 100, 0, 0.5, now_us=now_us)
        assert str(info.value) == f"invalid argument: now_us = {now_us} (want an int64 clock)"
    assert reported.stats(now_us=NOW_US) == before


def test_reports_for_ids_not_in_the_set_are_accepted_and_ignored(reported: polylb.Balancer) -> None:
    before = reported.stats(now_us=NOW_US)
    # 2**64 + 3 and 3 - 2**64 would be 3 if ctypes wrapped them; they name no invoker.
    for invoker_id in (99, 2**63 - 1, 2**64 - 1, 2**64 + 3, 3 - 2**64, -1):
        reported.report_load(invoker_id, 100, 0, 0.5, now_us=NOW_US)
    assert reported.stats(now_us=NOW_US) == before
    # ... though the numbers are still checked.
    for invoker_id in (99, 2**64 + 3):
        with pytest.raises(polylb.InvalidArgumentError, match="qps = -1"):
            reported.report_load(invoker_id, -1, 0, 0.5, now_us=NOW_US)


@pytest.mark.parametrize("strategy", ["random", "roundrobin", "leastactive", "p2c", "maglev"])
def test_other_strategies_accept_and_ignore_reports(strategy: str, balancer_factory: Any) -> None:
    lb = balancer_factory(strategy, seed=5)
    lb.update(invokers(3))
    before = lb.stats(now_us=NOW_US)
    lb.report_load(1, 100, 0, 0.5, now_us=NOW_US)
    lb.report_load(2, 100, 100, 1.0)
    lb.report_load(99, 1, 0, 1.0)
    after = lb.stats(now_us=NOW_US)
    assert after == before
    assert all("orca_weight" not in row for row in after["invokers"])
    with pytest.raises(polylb.InvalidArgumentError, match="eps = 2 is above qps = 1"):
        lb.report_load(1, 1, 2, 1.0)  # checked all the same


# -- stats --------------------------------------------------------------------------------------


def test_stats_carry_the_orca_fields(balancer_factory: Any) -> None:
    lb = balancer_factory("orca", orca_blackoutMs=5_000)
    lb.update(invokers(3, weights=[100, 100, 200]))
    rows = lb.stats(now_us=NOW_US)["invokers"]
    for row in rows:
        assert row["orca_weight"] is None
        assert row["orca_counted"] is False and row["orca_reported"] is False
        assert isinstance(row["orca_share"], float) and 0 <= row["orca_share"] <= 1
    # Before any report the configured weights deal: 1/4, 1/4, 1/2.
    assert [row["orca_share"] for row in rows] == pytest.approx([0.25, 0.25, 0.5], abs=1e-4)
    lb.report_load(1, 100, 0, 0.5, now_us=NOW_US)
    lb.report_load(2, 100, 0, 0.25, now_us=NOW_US)
    fields = orca_fields(lb, NOW_US + 1_000)
    assert fields[1][:3] == (200, False, False) and fields[2][:3] == (400, False, False)
    assert fields[3][0] is None
    lb.select(now_us=NOW_US + 6 * SECOND_US)  # past the blackout: the pick recomputes
    fields = orca_fields(lb, NOW_US + 6 * SECOND_US)
    assert [fields[i][:3] for i in (1, 2, 3)] == [(200, True, True), (400, True, True), (None, False, True)]
    # Invoker 3 takes the mean per unit of configured weight, 600 / 200 = 3, times its own
    # weight 200: 600, so 200 : 400 : 600.
    assert [fields[i][3] for i in (1, 2, 3)] == pytest.approx([2 / 12, 4 / 12, 6 / 12], abs=1e-4)
    assert sum(fields[i][3] for i in (1, 2, 3)) == pytest.approx(1.0, abs=1e-4)


# -- failover, subsets, config -----------------------------------------------------------------


def test_a_failover_never_returns_the_excluded_and_draws_by_weight(balancer_factory: Any) -> None:
    lb = balancer_factory("orca", orca_blackoutMs=0)
    lb.update(invokers(3))
    for invoker_id, qps in ((1, 100), (2, 100), (3, 300)):
        lb.report_load(invoker_id, qps, 0, 1.0, now_us=NOW_US)
    lb.report(lb.select(now_us=NOW_US), 1_000, Outcome.SUCCESS, now_us=NOW_US)  # recompute
    draws = 20_000
    seen = deal(lb, draws, NOW_US, exclude=[1])
    assert seen[1] == 0 and set(seen) == {2, 3}
    sigma = math.sqrt(draws * 0.75 * 0.25)
    assert abs(seen[3] - draws * 0.75) <= 5 * sigma, dict(seen)
    # Through call() too, and among a subset that excludes the rest.
    for _ in range(200):
        with lb.call(exclude=[3]) as call:
            assert call.id in (1, 2)
        assert lb.select(among=[1, 3], exclude=[3], now_us=NOW_US) == 1
        lb.report(1, 1_000, Outcome.SUCCESS, now_us=NOW_US)
    with pytest.raises(polylb.NoCandidateError):
        lb.select(exclude=[1, 2, 3], now_us=NOW_US)
    assert all(row["active"] == 0 for row in lb.stats()["invokers"])


def test_subsets_by_index_are_taken_with_reports_of_every_invoker(balancer_factory: Any) -> None:
    # (subset.key is refused, test_subset.py; reports of invokers outside the subset do not
    # draw calls out of it)
    lb = balancer_factory("orca", subset_size=4, subset_index=5, orca_blackoutMs=0)
    lb.update(invokers(12))
    members = {row["id"] for row in lb.stats()["invokers"] if row["in_subset"]}
    assert len(members) == 4
    for invoker_id in range(1, 13):
        lb.report_load(invoker_id, 100 * invoker_id, 0, 1.0, now_us=NOW_US)
    seen = deal(lb, 2000, NOW_US)
    assert set(seen) == members, f"picks {dict(seen)} outside or short of the subset {members}"


@pytest.mark.parametrize(
    "config, names",
    [
        ("loadbalance=orca&slowstart.windowMs=1000", "slowstart"),
        ("loadbalance=orca&orca.blackoutMs=-1", "orca.blackoutMs"),
        ("loadbalance=orca&orca.expirationMs=0", "orca.expirationMs"),
        ("loadbalance=orca&orca.updateMs=0", "orca.updateMs"),
        ("loadbalance=orca&orca.errorPenalty=101", "orca.errorPenalty"),
        ("loadbalance=orca&orca.errorPenalty=-0.5", "orca.errorPenalty"),
        ("loadbalance=random&orca.blackoutMs=0", "orca.blackoutMs"),
        ("loadbalance=orca&orca.blackoutms=0", "orca.blackoutMs"),  # the nearest key is suggested
    ],
)
def test_options_it_cannot_honour_are_refused(config: str, names: str) -> None:
    assert_config_error_naming(config, names)


def test_every_orca_key_is_spelled_by_a_keyword(balancer_factory: Any) -> None:
    lb = balancer_factory(
        "orca", orca_blackoutMs=0, orca_expirationMs=60_000, orca_updateMs=5_000, orca_errorPenalty=2.5
    )
    assert lb.config == (
        "loadbalance=orca&orca.blackoutMs=0&orca.expirationMs=60000&orca.updateMs=5000&orca.errorPenalty=2.5"
    )
    lb.update(invokers(2))
    lb.report_load(1, 100, 0, 1.0, now_us=NOW_US)
    lb.report_load(2, 100, 0, 1.0, now_us=NOW_US)
    assert_dealt(deal(lb, 1000, NOW_US), {1: 1, 2: 1}, 1000)
    # orca.updateMs=5000: a new report changes the deal only at the next recomputation.
    lb.report_load(2, 300, 0, 1.0, now_us=NOW_US + SECOND_US)
    assert_dealt(deal(lb, 1000, NOW_US + 4 * SECOND_US), {1: 1, 2: 1}, 1000)
    assert_dealt(deal(lb, 4000, NOW_US + 5 * SECOND_US), {1: 1, 2: 3}, 4000)
    # orca.expirationMs=60000: invoker 1, silent since NOW_US, lapses at NOW_US + 60 s.
    assert orca_fields(lb, NOW_US + 59_500_000)[1][1] is True
    assert orca_fields(lb, NOW_US + 60 * SECOND_US)[1][1] is False
    assert orca_fields(lb, NOW_US + 60 * SECOND_US)[2][1] is True


# -- lifetimes and threads ---------------------------------------------------------------------


def test_use_after_close_raises_even_for_a_bad_report() -> None:
    lb = polylb.Balancer("orca")
    lb.update(invokers(2))
    lb.close()
    for load in ((100, 0, 0.5), (-1, 0, 0.5), (1, 2, 0.5)):
        with pytest.raises(polylb.BalancerClosedError):
            lb.report_load(1, *load)
    with pytest.raises(polylb.BalancerClosedError):
        lb.report_load(1, 100, 0, 0.5, now_us=2**64)


# -- reconnects ---------------------------------------------------------------------------------


def test_a_reconnect_restarts_the_blackout(balancer_factory: Any) -> None:
    """report_reconnect (gRFC A58's READY again) stops the invoker's weight counting at once; it
    counts again a blackout after its next report."""
    lb = balancer_factory("orca", orca_blackoutMs=5_000, orca_updateMs=60_000)
    lb.update(invokers(2))
    loads = {1: (100.0, 0.0, 1.0), 2: (300.0, 0.0, 1.0)}
    report_every_second(lb, loads, NOW_US, NOW_US + 6 * SECOND_US)
    counted = NOW_US + 6 * SECOND_US
    assert_dealt(deal(lb, 400, counted), {1: 1, 2: 3}, 400)

    lb.report_reconnect(2, now_us=counted)
    assert orca_fields(lb, counted)[2][:2] == (300, False)  # the last weight, not counted
    assert orca_fields(lb, counted)[1][:2] == (100, True)
    assert_dealt(deal(lb, 400, counted), {1: 1, 2: 1}, 400)

    back = counted + SECOND_US
    report_every_second(lb, loads, back, back)
    assert_dealt(deal(lb, 400, back + 4_900_000), {1: 1, 2: 1}, 400)
    assert_dealt(deal(lb, 400, back + 5 * SECOND_US), {1: 1, 2: 3}, 400)
    lb.report_reconnect(2)  # the library's clock
    assert orca_fields(lb, back + 5 * SECOND_US)[2][1] is False


def test_reconnects_of_ids_not_in_the_set_are_accepted_and_ignored(reported: polylb.Balancer) -> None:
    before = reported.stats(now_us=NOW_US)
    for invoker_id in (99, 2**63 - 1, 2**64 - 1, 2**64 + 3, 3 - 2**64, -1):
        reported.report_reconnect(invoker_id, now_us=NOW_US)
    assert reported.stats(now_us=NOW_US) == before


def test_a_reconnect_checks_its_arguments(reported: polylb.Balancer) -> None:
    before = reported.stats(now_us=NOW_US)
    for now_us in (2**63, -(2**63) - 1):
        with pytest.raises(polylb.InvalidArgumentError) as info:
            reported.report_reconnect(3, now_us=now_us)
        assert str(info.value) == f"invalid argument: now_us = {now_us} (want an int64 clock)"
    with pytest.raises(TypeError, match="id must be an int, not bool"):
        reported.report_reconnect(True)
    with pytest.raises(TypeError, match="id"):
        reported.report_reconnect("3")  # type: ignore[arg-type]
    assert reported.stats(now_us=NOW_US) == before
    reported.close()
    with pytest.raises(polylb.BalancerClosedError):
        reported.report_reconnect(3)
    with pytest.raises(polylb.BalancerClosedError):
        reported.report_reconnect(3, now_us=2**64)


@pytest.mark.parametrize("strategy", ["random", "roundrobin", "leastactive", "p2c", "maglev"])
def test_other_strategies_accept_and_ignore_reconnects(strategy: str, balancer_factory: Any) -> None:
    lb = balancer_factory(strategy, seed=5)
    lb.update(invokers(3))
    twin = balancer_factory(strategy, seed=5)
    twin.update(invokers(3))
    before = lb.stats(now_us=NOW_US)
    for invoker_id in (1, 2, 3, 99):
        lb.report_reconnect(invoker_id, now_us=NOW_US)
    assert lb.stats(now_us=NOW_US) == before
    assert deal(lb, 200, NOW_US) == deal(twin, 200, NOW_US)


FULL_SET = invokers(8)
# Shares ids 1..6 with FULL_SET (their reports must survive), drops 7 and 8, adds 9 and 10.
OTHER_SET = invokers(6) + [Invoker(9, "10.0.0.9:20880"), Invoker(10, "10.0.0.10:20880", weight=50)]
EVER = {invoker.id for invoker in FULL_SET + OTHER_SET}
WORKERS = 12
CALLS_PER_WORKER = 400


def test_threads_select_report_and_report_load_while_the_set_changes(balancer_factory: Any) -> None:
    lb: polylb.Balancer = balancer_factory("orca", orca_blackoutMs=0, orca_updateMs=1)
    lb.update(FULL_SET)
    hello = lb.method("sayHello")
    done = threading.Event()
    updates = 0

    def updater() -> None:
        nonlocal updates
        while not done.is_set():
            lb.update(OTHER_SET if updates % 2 == 0 else FULL_SET)
            updates += 1
            lb.stats()

    def worker(seed: int) -> Counter:
        rng = random.Random(seed)
        tally: Counter = Counter()
        for i in range(CALLS_PER_WORKER):
            now_us = NOW_US + (seed * CALLS_PER_WORKER + i) * 1_000
            method = hello if i % 2 else 0
            if i % 5 == 0:
                # a failover among ids that every version of the set contains
                picked = lb.select(method=method, among=[1, 2, 3], exclude=[2], now_us=now_us)
                assert picked in (1, 3)
            else:
                picked = lb.select(method=method, now_us=now_us)
                assert picked in EVER, picked
            tally[picked] += 1
            # Each id always reports the same load, so whatever the interleaving its weight is
            # known: qps 100 × id, a tenth failing, at utilization 0.4: 200 × id.
            lb.report_load(picked, 100 * picked, 10 * picked, 0.4, now_us=now_us)
            outcome = rng.choice((Outcome.SUCCESS, Outcome.SUCCESS, Outcome.FAILURE))
            lb.report(picked, rng.randrange(100, 5_000), outcome, method=method, now_us=now_us)
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
    tally = sum(results, Counter())
    assert sum(tally.values()) == WORKERS * CALLS_PER_WORKER
    rows = by_id(lb.stats())
    for i in range(1, 7):  # in every version of the set: counters and reports kept throughout
        assert rows[i]["selected"] == tally[i], (i, rows[i]["selected"], tally[i])
        assert rows[i]["active"] == 0, rows[i]
        assert rows[i]["orca_weight"] == 200 * i, rows[i]
    for row in rows.values():
        assert row["orca_weight"] in (None, 200 * row["id"]), row
