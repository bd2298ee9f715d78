"""select() and report() make the common call (the whole set, the library's clock) through the
narrow entry points plb_select32 / plb_report32, called without ctypes argtypes. These tests hold
them to the results of the wide, declared calls, and check that arguments the narrow calls
cannot carry still take the wide ones."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import pytest

import polylb
import polylb._balancer as balancer_module
from polylb import Invoker, Outcome
from polylb._ffi import lib

T0_US = 1_700_000_000_000_000


def counting(function: Callable[..., Any], calls: List[int]) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        result = function(*args)
        calls.append(1)  # only calls that went through (a value beyond 32 bits raises)
        return result

    return wrapper


@pytest.mark.parametrize(
    "config",
    [
        "loadbalance=random&seed=7",
        "loadbalance=leastactive&seed=7",
        "loadbalance=roundrobin",
        "loadbalance=consistenthash",
    ],
)
def test_narrow_calls_equal_the_wide_ones(
    balancer_factory: Any, monkeypatch: pytest.MonkeyPatch, config: str
) -> None:
    narrow_calls: List[int] = []
    monkeypatch.setattr(
        balancer_module, "_plb_select32", counting(balancer_module._plb_select32, narrow_calls)
    )
    monkeypatch.setattr(
        balancer_module, "_plb_report32", counting(balancer_module._plb_report32, narrow_calls)
    )
    narrow: polylb.Balancer = balancer_factory(config=config)
    wide: polylb.Balancer = balancer_factory(config=config)
    # Ids whose two 32-bit halves both differ, so that a swapped or dropped half shows.
    ids = [(7 << 40) + i * 0x1_0000_0001 for i in range(12)]
    invokers = [
        Invoker(id, f"10.0.{i}.1:20880", weight=10 + 15 * (i % 4)) for i, id in enumerate(ids)
    ]
    narrow.update(invokers)
    wide.update(invokers)
    held: List[int] = []
    for k in range(2000):
        key = k.to_bytes(8, "little")
        picked = narrow.select(key)
        assert picked == lib.plb_select(wide._handle, 0, key, len(key), 0), k
        held.append(picked)
        if len(held) > 5:
            done = held.pop(0)
            elapsed = 100 + k % 900
            outcome = Outcome.FAILURE if k % 7 == 0 else Outcome.SUCCESS
            narrow.report(done, elapsed, outcome)
            assert lib.plb_report(wide._handle, 0, done, elapsed, int(outcome), 0) == 0
    assert len(narrow_calls) == 2000 + 1995
    # An elapsed time beyond 32 bits, or an explicit clock, takes the wide call.
    narrow.report(ids[0], 1 << 33, Outcome.SUCCESS)
    narrow.report(ids[1], 5, Outcome.SUCCESS, now_us=T0_US)
    for id, elapsed in ((ids[0], 1 << 33), (ids[1], 5)):
        assert lib.plb_report(wide._handle, 0, id, elapsed, 0, 0) == 0
    assert len(narrow_calls) == 2000 + 1995
    assert narrow.stats(now_us=T0_US) == wide.stats(now_us=T0_US)


def test_outcomes_and_ids_the_narrow_call_cannot_carry(balancer_factory: Any) -> None:
    lb: polylb.Balancer = balancer_factory("random")
    lb.update([Invoker(i, f"10.0.0.{i}:20880") for i in (1, 2, 3)])
    picked = lb.select()
    # 1 << 32 would be 0 (SUCCESS) if only its low 32 bits reached the library.
    for outcome in (4, -1, 1 << 32, 1 << 40):
        with pytest.raises(polylb.UnknownOutcomeError):
            lb.report(picked, 10, outcome)
    for bad_outcome in (1.0, "SUCCESS", [0], None):
        with pytest.raises(TypeError):
            lb.report(picked, 10, bad_outcome)  # type: ignore[arg-type]
    for bad_id in ("1", 1.0, None):
        with pytest.raises(TypeError):
            lb.report(bad_id, 10, Outcome.SUCCESS)  # type: ignore[arg-type]
    lb.report(picked, 10, Outcome.SUCCESS)
    stats: Dict[int, Dict[str, Any]] = {row["id"]: row for row in lb.stats()["invokers"]}
    assert sum(row["active"] for row in stats.values()) == 0


def test_a_closed_balancer_fails_the_narrow_calls_cleanly(balancer_factory: Any) -> None:
    lb: polylb.Balancer = balancer_factory("random")
    lb.update([Invoker(1, "10.0.0.1:20880")])
    lb.close()
    with pytest.raises(polylb.BalancerClosedError):
        lb.select()
    with pytest.raises(polylb.BalancerClosedError):
        lb.report(1, 10, Outcome.SUCCESS)


def test_the_narrow_calls_keep_the_gil_and_the_others_release_it() -> None:
    # The narrow select and report take tens of nanoseconds: releasing the GIL around them cost
    # more than the call and handed the GIL to another thread at every call (README, "Thread
    # safety"). Calls that can take long (update, stats, subsets, the wide calls) release it.
    import ctypes

    from polylb import _ffi

    keeps_gil = ctypes._FUNCFLAG_PYTHONAPI  # type: ignore[attr-defined]
    for narrow in (_ffi.select32, _ffi.report32):
        assert narrow._flags_ & keeps_gil, narrow
    for name in ("plb_balancer_update", "plb_balancer_stats", "plb_select", "plb_select_among", "plb_report"):
        assert not getattr(lib, name)._flags_ & keeps_gil, name
