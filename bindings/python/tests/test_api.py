"""The Pythonic API: config building, update/select/report, methods, stats, lifetimes, calls."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import pickle
import sys
import time
from typing import Any

import pytest

import polylb
from conftest import by_id, invokers
from polylb import Balancer, Invoker, Outcome


# -- config -----------------------------------------------------------------------------------


def test_keyword_params_map_underscores_to_dots() -> None:
    assert polylb.build_config("consistenthash", params={"hash_nodes": 160}) == (
        b"loadbalance=consistenthash&hash.nodes=160"
    )
    assert (
        polylb.build_config(params={"shortestresponse_slidePeriod": 5000})
        == b"shortestresponse.slidePeriod=5000"
    )


def test_config_string_mapping_and_keywords_combine_in_order() -> None:
    assert polylb.build_config("random", "seed=1", {"warmup": 10}) == b"loadbalance=random&seed=1&warmup=10"
    assert polylb.build_config(config={"hash.nodes": 8, "seed": None}) == b"hash.nodes=8"
    assert polylb.build_config(config=b"seed=3") == b"seed=3"
    assert polylb.build_config() == b""


def test_a_first_argument_with_an_equals_sign_is_a_config_string_as_in_the_other_bindings() -> None:
    assert polylb.build_config("loadbalance=p2c&seed=7") == b"loadbalance=p2c&seed=7"
    assert polylb.build_config("loadbalance=p2c", params={"seed": 7}) == b"loadbalance=p2c&seed=7"
    with Balancer("loadbalance=orca&seed=3") as lb:
        assert lb.stats()["strategy"] == "orca"
    # A strategy name stays one; a string that is neither is the library's error, as in C.
    assert polylb.build_config("p2c") == b"loadbalance=p2c"
    with pytest.raises(polylb.ConfigError, match="has no '='"):
        Balancer("orca&seed=3")


def test_config_values_given_as_bytes_or_str_subclasses_are_their_text() -> None:
    import enum

    class Zone(str, enum.Enum):
        US = "us-east"

    for zone in ("us-east", b"us-east", bytearray(b"us-east"), Zone.US):
        assert polylb.build_config("random", params={"zone": zone}) == b"loadbalance=random&zone=us-east"
    with pytest.raises(polylb.InvalidUtf8Error, match="zone"):
        polylb.build_config("random", params={"zone": b"\xff"})


def test_config_values_are_formatted_plainly() -> None:
    assert polylb.build_config(params={"a": True, "b": False, "c": 0.5, "d": None}) == b"a=true&b=false&c=0.5"


def test_config_numbers_are_written_as_numbers_whatever_their_class() -> None:
    # NumPy 2's float64 is a float whose repr is "np.float64(1.5)", and an IntEnum before
    # Python 3.11 prints as "Name.MEMBER": the library must get the number itself.
    class Float64(float):
        def __repr__(self) -> str:
            return f"np.float64({float.__repr__(self)})"

        __str__ = __repr__

    class Nodes(int):  # as an IntEnum member prints before Python 3.11
        def __str__(self) -> str:
            return "Nodes.EIGHT"

        __repr__ = __str__

    assert polylb.build_config(params={"boundedhash_factor": Float64(1.5), "hash_nodes": Nodes(8)}) == (
        b"boundedhash.factor=1.5&hash.nodes=8"
    )
    # A key's own case is kept: maglev_tableSize is maglev.tableSize.
    assert polylb.build_config("maglev", params={"maglev_tableSize": 257}) == (
        b"loadbalance=maglev&maglev.tableSize=257"
    )
    assert polylb.build_config(params={"f": 1e300, "g": -0.0, "h": 2**70}) == (
        b"f=1e+300&g=-0.0&h=1180591620717411303424"
    )


@pytest.mark.parametrize(
    "value, message",
    [
        (float("nan"), "config: boundedhash.factor='nan' is not a finite number (accepted: 1.0..=100)"),
        (float("inf"), "config: boundedhash.factor='inf' is not a finite number (accepted: 1.0..=100)"),
        (100.00000000000001, "config: boundedhash.factor='100.00000000000001' is out of range (accepted: 1.0..=100)"),
    ],
)
def test_config_numbers_refused_with_the_librarys_message(value: float, message: str) -> None:
    with pytest.raises(polylb.ConfigError) as e:
        Balancer("boundedhash", boundedhash_factor=value)
    assert str(e.value) == message


def test_config_values_cannot_smuggle_keys() -> None:
    with pytest.raises(polylb.ConfigError):
        polylb.build_config(params={"seed": "1&loadbalance=roundrobin"})
    with pytest.raises(polylb.ConfigError):
        polylb.build_config(config={"a=b": 1})


def test_balancer_accepts_every_spelling(balancer_factory: Any) -> None:
    for balancer in (
        balancer_factory("consistenthash", hash_nodes=160),
        balancer_factory(loadbalance="consistenthash", hash_nodes=160),
        balancer_factory(config="loadbalance=consistenthash&hash.nodes=160"),
        balancer_factory(config={"loadbalance": "consistenthash", "hash.nodes": 160}),
    ):
        assert balancer.config == "loadbalance=consistenthash&hash.nodes=160"
        assert balancer.stats()["strategy"] == "consistenthash"


def test_default_strategy_is_random(balancer_factory: Any) -> None:
    assert balancer_factory().stats()["strategy"] == "random"


# -- invokers, select, report -----------------------------------------------------------------


def test_invoker_defaults() -> None:
    invoker = Invoker(7, "10.0.0.7:20880")
    assert (invoker.weight, invoker.start_time_ms, invoker.warmup_ms, invoker.zone) == (100, 0, -1, None)


def test_update_select_report_roundtrip(balancer_factory: Any) -> None:
    lb = balancer_factory("roundrobin")
    lb.update(invokers(3))
    picked = lb.select()
    assert picked in (1, 2, 3)
    assert by_id(lb.stats())[picked]["active"] == 1
    lb.report(picked, 1500, Outcome.SUCCESS)
    row = by_id(lb.stats())[picked]
    assert (row["active"], row["selected"]) == (0, 1)


def test_stats_reflect_registration(balancer_factory: Any) -> None:
    lb = balancer_factory()
    lb.update(
        [
            Invoker(5, "10.0.0.5:20880", weight=7, zone="eu-1"),
            Invoker(6, b"10.0.0.6:20880", start_time_ms=0, warmup_ms=1000, zone=b"eu-2"),
        ]
    )
    rows = by_id(lb.stats())
    assert rows[5]["address"] == "10.0.0.5:20880" and rows[5]["weight"] == 7
    assert rows[6]["address"] == "10.0.0.6:20880" and rows[6]["weight"] == 100
    for row in rows.values():
        for field in ("id", "address", "weight", "effective_weight", "active", "selected", "failures"):
            assert field in row
    assert [row["id"] for row in lb.stats()["invokers"]] == [5, 6]  # the update's order


def test_plain_invokers_and_ones_the_checked_path_reads_give_the_same_set(balancer_factory: Any) -> None:
    # update() reads plain Invokers at once and anything else (a subclass, IntEnum or NumPy
    # numbers) through the checks that name what is wrong: both must hand the library the same set.
    class Tagged(Invoker):
        pass

    fields = [
        (1, "10.0.0.1:20880", 100, 0, -1, None),
        (2, "provider-ü.example:20880", 0, 1_700_000_000_000, 60_000, "zone-a"),
        (2**63 - 1, "[::1]:20880", 2**31 - 1, -5, 2**31 - 1, ""),
        (7, "10.0.0.7:20880", 150, 2**63 - 1, -(2**31), "zone-\u4e2d"),
    ]
    plain: Balancer = balancer_factory("random")
    checked: Balancer = balancer_factory("random")
    plain.update([Invoker(i, a, weight=w, start_time_ms=t, warmup_ms=u, zone=z) for i, a, w, t, u, z in fields])
    checked.update([Tagged(i, a, weight=w, start_time_ms=t, warmup_ms=u, zone=z) for i, a, w, t, u, z in fields])
    now = 1_700_000_100_000_000
    assert plain.stats(now_us=now)["invokers"] == checked.stats(now_us=now)["invokers"]


def test_update_replaces_the_set(balancer_factory: Any) -> None:
    lb = balancer_factory("roundrobin")
    lb.update(invokers(3))
    lb.update([Invoker(9, "10.0.0.9:20880")])
    assert {lb.select() for _ in range(5)} == {9}
    lb.update([])
    with pytest.raises(polylb.NoProviderError):
        lb.select()


def test_outcomes_are_counted(balancer_factory: Any) -> None:
    lb = balancer_factory("roundrobin")
    lb.update([Invoker(1, "10.0.0.1:20880")])
    for outcome in (Outcome.SUCCESS, Outcome.FAILURE, Outcome.TIMEOUT, Outcome.CANCELLED, 0):
        lb.report(lb.select(), 10, outcome)
    row = by_id(lb.stats())[1]
    assert row["active"] == 0 and row["selected"] == 5
    assert row["failures"] >= 1


def test_report_for_departed_id_is_harmless(balancer_factory: Any) -> None:
    lb = balancer_factory()
    lb.update(invokers(2))
    lb.report(12345, 10, Outcome.SUCCESS)
    picked = lb.select()
    lb.update([Invoker(3, "10.0.0.3:20880")])
    lb.report(picked, 10, Outcome.FAILURE)
    assert by_id(lb.stats())[3]["active"] == 0


def test_among_and_exclude(balancer_factory: Any) -> None:
    lb = balancer_factory("roundrobin")
    lb.update(invokers(5))
    for _ in range(20):
        assert lb.select(among=[2, 4]) in (2, 4)
        assert lb.select(exclude=[1, 2, 3, 4]) == 5
        assert lb.select(among=(1, 2, 3), exclude={1, 2}) == 3
        assert lb.select(among=iter([4])) == 4
    prebuilt = polylb.id_array([3, 5])
    assert {lb.select(among=prebuilt) for _ in range(10)} == {3, 5}
    # unknown ids in exclude are ignored
    assert lb.select(among=[1], exclude=[99]) == 1


def test_empty_among_means_all_as_in_the_c_abi(balancer_factory: Any) -> None:
    lb = balancer_factory("roundrobin")
    lb.update(invokers(3))
    assert {lb.select(among=[]) for _ in range(6)} == {1, 2, 3}


def test_key_spellings_hash_the_same(balancer_factory: Any) -> None:
    lb = balancer_factory("consistenthash")
    lb.update(invokers(5))
    for i in range(30):
        text = f"user-{i}-ünïcode"
        expected = lb.select(key=text.encode("utf-8"))
        assert lb.select(key=text) == expected
        assert lb.select(key=bytearray(text.encode("utf-8"))) == expected
        assert lb.select(key=memoryview(text.encode("utf-8"))) == expected
        assert lb.select(key=text, among=[1, 2, 3, 4, 5]) == expected


def test_key_subclasses_of_bytes_and_str_hash_as_their_values(balancer_factory: Any) -> None:
    # e.g. numpy.bytes_ / numpy.str_, or an application's own bytes or str subclass.
    class Key(bytes):
        pass

    class Text(str):
        pass

    lb = balancer_factory("consistenthash")
    lb.update(invokers(5))
    for i in range(30):
        text = f"user-{i}-ünïcode"
        expected = lb.select(key=text.encode("utf-8"))
        assert lb.select(key=Key(text.encode("utf-8"))) == expected
        assert lb.select(key=Text(text)) == expected
        assert lb.select(key=Key(text.encode("utf-8")), among=[1, 2, 3, 4, 5]) == expected
        assert lb.select(key=Text(text), method="m", now_us=1) == lb.select(key=text, method="m", now_us=1)
        with lb.call(key=Key(text.encode("utf-8"))) as call:
            assert call.id == expected


def test_key_with_nul_bytes_is_hashed_whole(balancer_factory: Any) -> None:
    lb = balancer_factory("consistenthash")
    lb.update(invokers(5))
    picks = {lb.select(key=b"\x00" + bytes([i])) for i in range(64)}
    assert len(picks) > 1  # the length is passed, so bytes after a NUL matter


# -- methods ----------------------------------------------------------------------------------


def test_method_ids(balancer_factory: Any) -> None:
    lb = balancer_factory()
    assert lb.method("") == 0
    say_hello = lb.method("sayHello")
    assert say_hello != 0
    assert lb.method("sayHello") == say_hello
    assert lb.method(b"sayHello") == say_hello
    assert lb.method("sayBye") not in (0, say_hello)
    assert lb.method("日本") == lb.method("日本".encode("utf-8"))


def test_methods_keep_separate_state(balancer_factory: Any) -> None:
    lb = balancer_factory("roundrobin")
    lb.update(invokers(2))
    hello = lb.method("sayHello")
    picked = lb.select(method=hello)
    rows = by_id(lb.stats())
    per_method = {m["method"]: m for m in rows[picked]["methods"]}
    assert per_method["sayHello"]["active"] == 1
    lb.report(picked, 10, Outcome.SUCCESS, method="sayHello")  # by name works too
    assert by_id(lb.stats())[picked]["active"] == 0


def test_method_by_name_in_select(balancer_factory: Any) -> None:
    lb = balancer_factory("roundrobin")
    lb.update(invokers(2))
    picked = lb.select(method="sayHello")
    lb.report(picked, 10, Outcome.SUCCESS, method=lb.method("sayHello"))
    assert all(row["active"] == 0 for row in lb.stats()["invokers"])


# -- stats ------------------------------------------------------------------------------------


def test_stats_grow_their_buffer(balancer_factory: Any) -> None:
    lb = balancer_factory()
    lb.update([Invoker(i, f"host-{i:05d}.example.internal:20880") for i in range(3000)])
    lb._stats_capacity = 16  # start far too small: the retry must size it from *len
    stats = lb.stats()
    assert len(stats["invokers"]) == 3000
    assert stats["invokers"][2999]["address"] == "host-02999.example.internal:20880"
    assert lb._stats_capacity > 100_000  # remembered for next time


def test_stats_effective_weight_at_time(balancer_factory: Any) -> None:
    lb = balancer_factory()
    start_ms = 1_700_000_000_000
    lb.update([Invoker(1, "10.0.0.1:20880", weight=100, start_time_ms=start_ms, warmup_ms=10_000)])
    assert by_id(lb.stats(now_us=(start_ms + 5_000) * 1000))[1]["effective_weight"] == 50
    assert by_id(lb.stats(now_us=(start_ms + 20_000) * 1000))[1]["effective_weight"] == 100


def test_stats_of_a_small_set_after_a_large_one_allocate_for_the_small_one() -> None:
    # The buffer size of the last stats was kept as the next first guess, and only ever grew:
    # after one stats of 20,000 invokers (a few MB of JSON) every stats of a one-invoker set
    # allocated that much again.
    import tracemalloc

    lb = Balancer()
    lb.update(Invoker(i, f"10.0.{i // 256}.{i % 256}:20880") for i in range(1, 20001))
    big = len(json.dumps(lb.stats()))
    lb.update(invokers(1))
    tracemalloc.start()
    try:
        lb.stats()  # may still use the large guess once
        tracemalloc.reset_peak()
        for _ in range(3):
            assert [row["id"] for row in lb.stats()["invokers"]] == [1]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < big / 20, f"peak {peak} B for a one-invoker stats after a {big} B one"
    lb.close()


# -- lifetimes --------------------------------------------------------------------------------


def test_close_is_idempotent_and_final() -> None:
    lb = Balancer()
    lb.update(invokers(2))
    assert not lb.closed
    lb.close()
    lb.close()
    assert lb.closed
    assert "closed" in repr(lb)


@pytest.mark.parametrize(
    "config",
    [{1: 2}, {"a&b": 1}, {"seed": "1&2"}, {"seed": b"\xff"}, "loadbalance=nosuchstrategy"],
    ids=["key-type", "key", "value", "value-utf8", "refused-by-the-library"],
)
def test_a_balancer_whose_creation_failed_has_a_repr_and_closes(config: Any) -> None:
    """A Balancer whose __init__ raised (in build_config or in the library) is still reachable (a
    traceback's locals, a debugger, a subclass): repr() and close() work on it."""
    half_built = Balancer.__new__(Balancer)
    with pytest.raises((TypeError, polylb.PolylbError)):
        half_built.__init__(config=config)  # type: ignore[misc]
    assert repr(half_built).endswith(" closed>")
    assert half_built.closed
    half_built.close()


@pytest.mark.parametrize(
    "use",
    [
        lambda lb: lb.select(),
        lambda lb: lb.select(key="k", among=[1], exclude=[2]),
        lambda lb: lb.report(1, 10, Outcome.SUCCESS),
        lambda lb: lb.report_provider_metrics(1, 1, 0.5, 10),
        lambda lb: lb.report_load(1, 100.0, 0.0, 0.5),
        lambda lb: lb.report_reconnect(1),
        lambda lb: lb.update(invokers(1)),
        lambda lb: lb.method("sayHello"),
        lambda lb: lb.stats(),
        lambda lb: lb.call().__enter__(),
        lambda lb: lb.__enter__(),
    ],
)
def test_use_after_close_raises_a_clear_error(use: Any) -> None:
    lb = Balancer()
    lb.update(invokers(2))
    lb.close()
    with pytest.raises(polylb.BalancerClosedError) as info:
        use(lb)
    assert isinstance(info.value, ValueError) and isinstance(info.value, polylb.PolylbError)
    assert "closed" in str(info.value)


def test_with_block_closes() -> None:
    with Balancer("roundrobin") as lb:
        lb.update(invokers(2))
        lb.select()
    assert lb.closed


def test_failed_creation_leaves_nothing_to_free() -> None:
    with pytest.raises(polylb.ConfigError):
        Balancer(loadbalance="nope")


def test_garbage_collection_frees_the_handle() -> None:
    lb = Balancer()
    lb.update(invokers(2))
    finalizer = lb._finalizer
    assert finalizer.alive
    del lb
    gc.collect()
    assert not finalizer.alive


def test_finalizer_does_not_run_at_interpreter_exit() -> None:
    # daemon threads may still be inside the library while atexit handlers run
    lb = Balancer()
    assert lb._finalizer.atexit is False
    lb.close()


def test_close_drops_the_set_and_collection_frees_the_handle() -> None:
    # close() empties the set at once but leaves the handle to the finalizer, so that a call
    # racing close() in another thread can never reach freed memory.
    lb = Balancer()
    lb.update(invokers(3))
    finalizer = lb._finalizer
    handle = lb._handle
    lb.close()
    assert finalizer.alive
    assert polylb._ffi.lib.plb_select(handle, 0, None, 0, 0) == -int(polylb.Status.NO_PROVIDER)
    del lb
    gc.collect()
    assert not finalizer.alive


@pytest.mark.parametrize(
    "duplicate",
    [copy.copy, copy.deepcopy, lambda lb: pickle.loads(pickle.dumps(lb))],
    ids=["copy", "deepcopy", "pickle"],
)
def test_a_balancer_cannot_be_copied(duplicate: Any) -> None:
    # copy.copy used to make a second Balancer on the same native handle, without a finalizer
    # of its own: once the original was collected, its finalizer freed the handle under the
    # copy, and the copy's next select was a use after free (a segfault).
    lb = Balancer("roundrobin")
    lb.update(invokers(3))
    with pytest.raises(TypeError, match="Balancer"):
        duplicate(lb)
    assert lb.select() in (1, 2, 3)
    lb.close()


# -- the call context manager -----------------------------------------------------------------


def _single(balancer_factory: Any, strategy: str = "roundrobin") -> Balancer:
    lb: Balancer = balancer_factory(strategy)
    lb.update([Invoker(1, "10.0.0.1:20880")])
    return lb


def test_call_id_is_known_only_once_the_block_is_entered(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    call = lb.call()
    with pytest.raises(RuntimeError, match="entered"):
        call.id
    assert by_id(lb.stats())[1]["selected"] == 0  # nothing was selected yet
    with call:
        assert call.id == 1
    assert call.id == 1  # still readable after the block, e.g. to log where the call went


def _in_flight_and_selected(lb: Balancer) -> list[tuple[int, int, int]]:
    return [(r["id"], r["active"], r["selected"]) for r in lb.stats()["invokers"]]


def test_a_call_entered_again_while_open_raises_and_leaves_nothing_in_flight(balancer_factory: Any) -> None:
    lb: Balancer = balancer_factory("leastactive")
    lb.update([Invoker(1, "10.0.0.1:20880"), Invoker(2, "10.0.0.2:20880")])
    call = lb.call()
    with call:
        with pytest.raises(RuntimeError, match="already entered and has not ended"):
            with call:
                pass
    # One select, one report: a second select would have left one invoker counted for good.
    assert sum(a for _, a, _ in _in_flight_and_selected(lb)) == 0
    assert sum(s for _, _, s in _in_flight_and_selected(lb)) == 1


def test_one_call_shared_by_two_coroutines_ends_exactly_once(balancer_factory: Any) -> None:
    lb: Balancer = balancer_factory("leastactive")
    lb.update([Invoker(1, "10.0.0.1:20880"), Invoker(2, "10.0.0.2:20880")])
    shared = lb.call()

    async def rpc() -> None:
        async with shared:
            await asyncio.sleep(0.01)

    async def main() -> list[Any]:
        return await asyncio.gather(rpc(), rpc(), return_exceptions=True)

    results = asyncio.run(main())
    assert [type(r) for r in results].count(RuntimeError) == 1, results
    assert sum(a for _, a, _ in _in_flight_and_selected(lb)) == 0
    assert sum(s for _, _, s in _in_flight_and_selected(lb)) == 1


def test_a_call_that_ended_is_not_entered_again(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    call = lb.call()
    with call:
        call.outcome = Outcome.FAILURE
    with pytest.raises(RuntimeError, match=r"already entered: make one with Balancer\.call\(\)"):
        with call:
            pass
    assert by_id(lb.stats())[1]["selected"] == 1
    assert by_id(lb.stats())[1]["failures"] == 1


def test_a_call_whose_select_failed_can_be_entered_once_there_is_a_provider(balancer_factory: Any) -> None:
    lb: Balancer = balancer_factory("roundrobin")
    call = lb.call()
    with pytest.raises(polylb.NoProviderError):
        with call:
            pass
    lb.update([Invoker(1, "10.0.0.1:20880")])
    with call:
        assert call.id == 1
    assert by_id(lb.stats())[1]["active"] == 0


def test_a_call_is_made_by_the_balancer_only() -> None:
    with pytest.raises(TypeError, match=r"Balancer\.call\(\)"):
        polylb.Call()


def test_call_success_measures_elapsed(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    with lb.call() as call:
        assert call.id == 1
        assert by_id(lb.stats())[1]["active"] == 1
        time.sleep(0.02)
    row = by_id(lb.stats())[1]
    assert (row["active"], row["selected"], row["failures"]) == (0, 1, 0)
    assert row["succeeded"] == 1
    assert row["mean_success_us"] >= 20_000


def test_call_exception_is_failure_and_propagates(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    with pytest.raises(ConnectionError):
        with lb.call():
            raise ConnectionError("refused")
    row = by_id(lb.stats())[1]
    assert (row["active"], row["failures"], row["timeouts"], row["succeeded"]) == (0, 1, 0, 0)


def test_call_timeout_error_is_timeout(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    with pytest.raises(TimeoutError):
        with lb.call():
            raise TimeoutError()
    row = by_id(lb.stats())[1]
    assert (row["active"], row["timeouts"]) == (0, 1)


class WrapperError(Exception):
    """A library's own error around the one it caught (requests' ReadTimeout, httpx's...)."""


def _chain(depth: int, bottom: BaseException) -> BaseException:
    """``depth`` wrappers, each the __cause__ of the one above, over ``bottom``."""
    error = bottom
    for level in range(depth):
        outer = WrapperError(f"level {level}")
        outer.__cause__ = error
        error = outer
    return error


def _raised(make: Any) -> BaseException:
    """What ``make()`` raises (a chain built by real raises)."""
    try:
        make()
    except BaseException as error:
        return error
    raise AssertionError("nothing raised")


def _requests_style() -> None:
    # requests: ReadTimeout raised while handling urllib3's ReadTimeoutError (its __context__),
    # which was raised from the socket's TimeoutError (its __cause__).
    try:
        try:
            raise TimeoutError("timed out")
        except TimeoutError as socket_error:
            raise WrapperError("ReadTimeoutError") from socket_error
    except WrapperError:
        raise WrapperError("ReadTimeout")


def _httpx_style() -> None:
    # httpx: its ReadTimeout raised from httpcore's, which httpcore's pool re-raised `from None`
    # after it had been raised from the TimeoutError: the TimeoutError is in a suppressed context.
    try:
        try:
            try:
                raise TimeoutError("timed out")
            except TimeoutError as socket_error:
                raise WrapperError("httpcore.ReadTimeout") from socket_error
        except WrapperError as core_error:
            raise core_error from None
    except WrapperError as core_error:
        raise WrapperError("httpx.ReadTimeout") from core_error


def _urllib_style() -> BaseException:
    # urllib.request wraps the socket's timeout as URLError(reason=TimeoutError); built outside an
    # except block, the reason is its only link to it.
    import urllib.error

    return urllib.error.URLError(TimeoutError("timed out"))


def _explicit_cause_over_a_timeout() -> None:
    try:
        raise TimeoutError("timed out")
    except TimeoutError:
        raise WrapperError("refused") from ConnectionRefusedError()  # the cause replaces the context


def _cycle() -> BaseException:
    first, second = WrapperError("first"), WrapperError("second")
    first.__context__, second.__context__ = second, first
    return first


@pytest.mark.parametrize(
    "make, outcome",
    [
        (lambda: _raised(_requests_style), Outcome.TIMEOUT),
        (lambda: _raised(_httpx_style), Outcome.TIMEOUT),
        (_urllib_style, Outcome.TIMEOUT),
        (lambda: _chain(1, TimeoutError()), Outcome.TIMEOUT),
        (lambda: _chain(10, TimeoutError()), Outcome.TIMEOUT),
        # The timeouts that are classes of their own before Python 3.11.
        (lambda: asyncio.TimeoutError(), Outcome.TIMEOUT),
        (lambda: __import__("concurrent.futures").futures.TimeoutError(), Outcome.TIMEOUT),
        (lambda: _chain(2, asyncio.TimeoutError()), Outcome.TIMEOUT),
        (lambda: __import__("socket").timeout(), Outcome.TIMEOUT),  # an OSError only, on 3.9
        # No timeout in the chain, or none the walk reaches.
        (lambda: _chain(3, ConnectionResetError()), Outcome.FAILURE),
        (lambda: _raised(_explicit_cause_over_a_timeout), Outcome.FAILURE),
        (_cycle, Outcome.FAILURE),
        (lambda: _chain(100, TimeoutError()), Outcome.FAILURE),  # deeper than the walk's bound
        # Not an Exception: this side gave the call up, whatever it was handling.
        (lambda: _chain_base(KeyboardInterrupt(), TimeoutError()), Outcome.CANCELLED),
    ],
    ids=[
        "requests", "httpx", "urllib", "cause", "cause-10-deep", "asyncio", "concurrent.futures",
        "asyncio-wrapped", "socket.timeout", "no-timeout", "cause-replaces-context", "cycle", "too-deep", "KeyboardInterrupt",
    ],
)
def test_call_a_wrapped_timeout_is_a_timeout(balancer_factory: Any, make: Any, outcome: Outcome) -> None:
    """A timeout wrapped by a library's own error (via __cause__, __context__ or urllib's
    URLError.reason) is a timeout, as Go's OutcomeOf follows Unwrap and Rust source(); the walk
    is bounded (64 exceptions) and stops at cycles."""
    lb = _single(balancer_factory)
    error = make()
    with pytest.raises(type(error)) as raised:
        with lb.call():
            raise error
    assert raised.value is error
    row = by_id(lb.stats())[1]
    assert (row["active"], row["failures"], row["timeouts"]) == {
        Outcome.TIMEOUT: (0, 1, 1), Outcome.FAILURE: (0, 1, 0), Outcome.CANCELLED: (0, 0, 0)
    }[outcome]


def _chain_base(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__context__ = inner
    return outer


def test_call_keyboard_interrupt_is_cancelled(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    with pytest.raises(KeyboardInterrupt):
        with lb.call():
            raise KeyboardInterrupt()
    row = by_id(lb.stats())[1]
    assert (row["active"], row["failures"], row["succeeded"]) == (0, 0, 0)


def test_call_outcome_can_be_set(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    with lb.call() as call:
        call.outcome = Outcome.FAILURE  # e.g. an error response that raised nothing
    assert by_id(lb.stats())[1]["failures"] == 1


@pytest.mark.parametrize("bad", ["oops", 7, -1, 2.0, object()])
def test_call_with_an_invalid_outcome_still_ends_and_keeps_the_blocks_exception(
    balancer_factory: Any, bad: Any
) -> None:
    lb = _single(balancer_factory)
    with pytest.raises(KeyError, match="the block's own"):
        with lb.call() as call:
            call.outcome = bad
            raise KeyError("the block's own")
    row = by_id(lb.stats())[1]
    # Ended as cancelled: the in-flight count is undone, nothing is credited or blamed.
    assert (row["active"], row["selected"], row["succeeded"], row["failures"]) == (0, 1, 0, 0)


@pytest.mark.parametrize("bad, error", [("oops", TypeError), (7, ValueError), (2.0, TypeError)])
def test_call_with_an_invalid_outcome_after_a_normal_block_raises(
    balancer_factory: Any, bad: Any, error: type
) -> None:
    lb = _single(balancer_factory)
    with pytest.raises(error, match="outcome"):
        with lb.call() as call:
            call.outcome = bad
    row = by_id(lb.stats())[1]
    assert (row["active"], row["succeeded"], row["failures"]) == (0, 0, 0)


def test_call_with_method_key_and_subset(balancer_factory: Any) -> None:
    lb = balancer_factory("consistenthash")
    lb.update(invokers(4))
    with lb.call(key="user-1", method="sayHello", among=[2, 3], exclude=[2]) as call:
        assert call.id == 3
    assert all(row["active"] == 0 for row in lb.stats()["invokers"])


def test_call_select_failure_reports_nothing(balancer_factory: Any) -> None:
    lb = balancer_factory()
    with pytest.raises(polylb.NoProviderError):
        with lb.call():
            pytest.fail("the body must not run")


def test_async_call(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)

    async def main() -> None:
        async with lb.call() as call:
            assert call.id == 1
            await asyncio.sleep(0)
        try:
            async with lb.call():
                raise asyncio.CancelledError()
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    row = by_id(lb.stats())[1]
    assert (row["active"], row["selected"], row["succeeded"], row["failures"]) == (0, 2, 1, 0)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout() is new in Python 3.11")
def test_an_asyncio_deadline_is_a_timeout_inside_the_block_and_a_cancel_around_it(
    balancer_factory: Any,
) -> None:
    """asyncio.timeout cancels the task and turns the cancel into TimeoutError only where it
    stands: inside the call block the block sees TimeoutError; around it, a CancelledError."""
    lb = _single(balancer_factory)

    async def inside() -> None:
        async with lb.call():
            async with asyncio.timeout(0.01):
                await asyncio.sleep(10)

    async def around() -> None:
        async with asyncio.timeout(0.01):
            async with lb.call():
                await asyncio.sleep(10)

    with pytest.raises(TimeoutError):
        asyncio.run(inside())
    row = by_id(lb.stats())[1]
    assert (row["active"], row["failures"], row["timeouts"]) == (0, 1, 1)
    with pytest.raises(TimeoutError):
        asyncio.run(around())
    row = by_id(lb.stats())[1]
    assert (row["active"], row["selected"], row["failures"], row["timeouts"]) == (0, 2, 1, 1)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups and asyncio.TaskGroup are new in Python 3.11")
def test_an_exception_group_is_read_by_its_members(balancer_factory: Any) -> None:
    """asyncio.TaskGroup raises what its tasks raised in an ExceptionGroup: a member's timeout
    is a timeout, as Go's OutcomeOf finds one in a joined error (errors.Join), not a failure."""
    lb = _single(balancer_factory)

    async def tasks_inside() -> None:
        async def reader() -> None:
            await asyncio.wait_for(asyncio.sleep(10), 0.01)

        async with lb.call():
            async with asyncio.TaskGroup() as group:
                group.create_task(reader())

    with pytest.raises(BaseExceptionGroup):  # noqa: F821 (a builtin from 3.11)
        asyncio.run(tasks_inside())
    row = by_id(lb.stats())[1]
    assert (row["active"], row["failures"], row["timeouts"]) == (0, 1, 1)

    cases = [
        (ExceptionGroup("g", [TimeoutError()]), Outcome.TIMEOUT),  # noqa: F821
        (ExceptionGroup("g", [ValueError(), _raised(_requests_style)]), Outcome.TIMEOUT),  # noqa: F821
        (ExceptionGroup("g", [ExceptionGroup("inner", [TimeoutError()])]), Outcome.TIMEOUT),  # noqa: F821
        (ExceptionGroup("g", [ValueError(), OSError()]), Outcome.FAILURE),  # noqa: F821
        (BaseExceptionGroup("g", [KeyboardInterrupt()]), Outcome.CANCELLED),  # noqa: F821
        (WrapperError("wraps a group"), Outcome.TIMEOUT),
    ]
    cases[-1][0].__cause__ = ExceptionGroup("g", [TimeoutError()])  # noqa: F821
    for error, outcome in cases:
        lb = _single(balancer_factory)
        with pytest.raises(type(error)) as raised:
            with lb.call():
                raise error
        assert raised.value is error
        row = by_id(lb.stats())[1]
        got = (row["active"], row["failures"], row["timeouts"])
        want = {Outcome.TIMEOUT: (0, 1, 1), Outcome.FAILURE: (0, 1, 0), Outcome.CANCELLED: (0, 0, 0)}[outcome]
        assert got == want, repr(error)

# -- module surface ---------------------------------------------------------------------------


def test_versions_and_path() -> None:
    assert polylb.ABI_VERSION == 1
    assert polylb.library_version()[0].isdigit()
    assert polylb.library_path().endswith(polylb._ffi.library_filename())


def test_status_text_for_every_code() -> None:
    for status in polylb.Status:
        assert polylb._ffi.status_text(status)
        assert polylb._ffi.status_text(-status) == polylb._ffi.status_text(status)
    assert polylb._ffi.status_text(12345)


def test_type_hints_resolve_at_run_time() -> None:
    # What documentation tools and run-time checkers read (typing.get_type_hints): every public
    # class's and function's hints, and its methods', name types the package can resolve.
    import inspect
    import typing

    checked = 0
    for name in polylb.__all__:
        public = getattr(polylb, name)
        if not (inspect.isclass(public) or inspect.isfunction(public)):
            continue
        members = [m for _, m in inspect.getmembers(public, inspect.isfunction)] if inspect.isclass(public) else []
        for item in [public, *members]:
            typing.get_type_hints(item)
            checked += 1
    assert checked > 40
