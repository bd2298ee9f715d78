"""Every bad input ends in the right exception (never a crash), carrying the library's message."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import pytest

import polylb
from conftest import by_id, invokers
from polylb import Invoker, Outcome, Status


# -- config -----------------------------------------------------------------------------------


def test_misspelled_key_names_the_nearest() -> None:
    with pytest.raises(polylb.ConfigError) as info:
        polylb.Balancer(config="loadBalance=roundrobin")
    error = info.value
    assert error.status is Status.INVALID_CONFIG
    assert "loadBalance" in error.message and "did you mean 'loadbalance'" in error.message
    assert str(error) == error.message
    assert isinstance(error, ValueError)


def test_misspelled_keyword_param() -> None:
    with pytest.raises(polylb.ConfigError, match="hash.nodes"):
        polylb.Balancer("consistenthash", hash_node=160)


def test_unknown_key() -> None:
    with pytest.raises(polylb.ConfigError, match="frobnicate"):
        polylb.Balancer(frobnicate=1)


def test_unknown_strategy_suggests() -> None:
    with pytest.raises(polylb.ConfigError, match="roundrobin"):
        polylb.Balancer("roundrobbin")


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        # 600 two-byte characters quoted as 512: the quote alone fills a 1 KB buffer.
        ("loadbalance=" + "\u00e9" * 600, "is an unknown strategy; known: random,"),
        ("\u00e9" * 600 + "=1", "(known keys: loadbalance,"),
        ("x" * 10_000 + "=1", "(known keys: loadbalance,"),
    ],
)
def test_a_long_config_error_keeps_the_whole_message(config: str, reason: str) -> None:
    # The library bounds what it quotes, not its message: these pass 1 KB, and a cut one lost
    # what was wrong (Java's, Rust's and C++'s messages are whole).
    with pytest.raises(polylb.ConfigError) as info:
        polylb.Balancer(config=config)
    message = info.value.message
    assert reason in message
    assert message.endswith(("orca", "orca.errorPenalty)")), message[-80:]
    assert len(message.encode()) > 1024


@pytest.mark.parametrize(
    "params",
    [
        {"hash_nodes": 3},
        {"hash_nodes": "many"},
        {"hash_nodes": -160},
        {"timeout": 0},
        {"seed": -1},
        {"seed": 1.5},
        {"warmup": "soon"},
        {"shortestresponse_slidePeriod": 0.5},
    ],
)
def test_bad_values(params: Any) -> None:
    with pytest.raises(polylb.ConfigError):
        polylb.Balancer(**params)


def test_duplicate_key_between_string_and_keywords() -> None:
    with pytest.raises(polylb.ConfigError, match="twice"):
        polylb.Balancer("random", config="loadbalance=roundrobin")


def test_pair_without_equals() -> None:
    with pytest.raises(polylb.ConfigError):
        polylb.Balancer(config="loadbalance")


def test_config_bytes_not_utf8() -> None:
    with pytest.raises(polylb.InvalidUtf8Error) as info:
        polylb.Balancer(config=b"loadbalance=\xff\xfe")
    assert info.value.status is Status.INVALID_UTF8


def test_config_lone_surrogate() -> None:
    with pytest.raises(polylb.InvalidUtf8Error):
        polylb.Balancer(config="seed=\udc80")


@pytest.mark.parametrize(
    "arguments, text",
    [
        ({"config": "zone=\udc80"}, "zone=\udc80"),
        ({"config": {"zone": "z\udc80"}}, "zone=z\udc80"),
        ({"zone": "\udc80"}, "zone=\udc80"),
        ({"loadbalance": "\ud800"}, "loadbalance=\ud800"),
    ],
)
def test_config_lone_surrogate_has_the_message_of_its_bytes(arguments: Any, text: str) -> None:
    """Whichever argument holds it, a lone surrogate is InvalidUtf8Error with the library's message
    for the bytes C and Go would pass (the surrogate's three), as Java gives it."""
    with pytest.raises(polylb.InvalidUtf8Error) as as_bytes:
        polylb.Balancer(config=text.encode("utf-8", "surrogatepass"))
    assert "from index" in str(as_bytes.value)
    with pytest.raises(polylb.InvalidUtf8Error) as as_text:
        polylb.Balancer(**arguments)
    assert str(as_text.value) == str(as_bytes.value)


# -- update -----------------------------------------------------------------------------------


@pytest.fixture
def lb(balancer_factory: Any) -> polylb.Balancer:
    balancer: polylb.Balancer = balancer_factory("roundrobin")
    balancer.update(invokers(3))
    return balancer


def test_negative_weight(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.NegativeWeightError, match="negative") as info:
        lb.update([Invoker(1, "10.0.0.1:20880", weight=-1)])
    assert info.value.status is Status.NEGATIVE_WEIGHT
    with pytest.raises(polylb.NegativeWeightError):
        lb.update([Invoker(1, "10.0.0.1:20880", weight=-(2**40))])


def test_weight_beyond_int32(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.InvalidArgumentError, match="weight"):
        lb.update([Invoker(1, "10.0.0.1:20880", weight=2**31)])


def test_other_fields_beyond_their_c_types(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.InvalidArgumentError, match="warmup_ms"):
        lb.update([Invoker(1, "a:1", warmup_ms=2**31)])
    with pytest.raises(polylb.InvalidArgumentError, match="start_time_ms"):
        lb.update([Invoker(1, "a:1", start_time_ms=2**63)])


def test_duplicate_id(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.DuplicateIdError, match="7"):
        lb.update([Invoker(7, "10.0.0.1:20880"), Invoker(7, "10.0.0.2:20880")])


@pytest.mark.parametrize("bad_id", [2**63, 2**64 - 1, 2**64, -1, -(2**70)])
def test_id_out_of_range(lb: polylb.Balancer, bad_id: int) -> None:
    with pytest.raises(polylb.IdOutOfRangeError) as info:
        lb.update([Invoker(bad_id, "10.0.0.1:20880")])
    assert info.value.status is Status.ID_OUT_OF_RANGE


def test_largest_id_is_accepted(lb: polylb.Balancer) -> None:
    lb.update([Invoker(2**63 - 1, "10.0.0.1:20880")])
    assert lb.select() == 2**63 - 1


def test_address_not_utf8(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.InvalidUtf8Error, match="address"):
        lb.update([Invoker(1, b"10.0.0.1:\xff")])


def test_zone_not_utf8(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.InvalidUtf8Error, match="zone"):
        lb.update([Invoker(1, "10.0.0.1:20880", zone=b"\xc3\x28")])


def test_address_lone_surrogate(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.InvalidUtf8Error):
        lb.update([Invoker(1, "10.0.0.1:\ud800")])


def _c_update_status(invokers: "list[Invoker]") -> int:
    """What plb_balancer_update returns for the same list given as C (and Go) would give it."""
    from polylb._ffi import PlbInvoker, lib

    def raw(text: "str | bytes | None") -> bytes:
        if text is None:
            return b""
        return text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")

    keep = [(raw(i.address), raw(i.zone)) for i in invokers]
    array = (PlbInvoker * len(invokers))(
        *(
            PlbInvoker(i.id if 0 <= i.id < 2**64 else 2**64 - 1, a, len(a), i.weight, i.start_time_ms, i.warmup_ms, z or None, len(z))
            for i, (a, z) in zip(invokers, keep)
        )
    )
    probe = polylb.Balancer("roundrobin")
    try:
        status: int = lib.plb_balancer_update(probe._handle, array, len(invokers), None, 0, None)
    finally:
        probe.close()
    return status


@pytest.mark.parametrize(
    "bad, status, named",
    [
        ([Invoker(1, "a:1", weight=-1), Invoker(-1, "b:1")], Status.NEGATIVE_WEIGHT, "#0"),
        ([Invoker(1, "a:1"), Invoker(1, "b:1"), Invoker(-5, "c:1")], Status.DUPLICATE_ID, "#1"),
        ([Invoker(-1, "a:1"), Invoker(2, "\ud800b:1")], Status.INVALID_UTF8, "#1 address"),
        ([Invoker(2**64, "a:1"), Invoker(2, "b:1", zone=b"\xff")], Status.INVALID_UTF8, "#1 zone"),
        ([Invoker(1, b"\xffa:1"), Invoker(2, "\ud800b:1")], Status.INVALID_UTF8, "#0 address"),
        ([Invoker(1, "a:1"), Invoker(-7, "b:1", weight=-1), Invoker(-1, "c:1")], Status.ID_OUT_OF_RANGE, "#1: id -7"),
        ([Invoker(3, "a:1"), Invoker(2**64, "b:1", weight=-1)], Status.ID_OUT_OF_RANGE, f"#1: id {2**64}"),
    ],
)
def test_update_with_several_bad_invokers_reports_what_the_c_abi_reports(
    lb: polylb.Balancer, bad: "list[Invoker]", status: Status, named: str
) -> None:
    # The C ABI checks every address and zone for UTF-8 first, then each invoker in order (id
    # <= INT64_MAX, weight >= 0, id not used before); Go passes its list unchanged. An id no C
    # type holds (as a negative Java long) is rejected where the library rejects an id above
    # INT64_MAX, so the C form of such an id here is one above INT64_MAX.
    assert _c_update_status(bad) == status
    with pytest.raises(polylb.PolylbError) as info:
        lb.update(bad)
    assert info.value.status is status
    assert named in info.value.message, info.value.message


def test_weight_below_int32_is_reported_in_order(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.NegativeWeightError) as info:
        lb.update([Invoker(1, "a:1", weight=-(2**40)), Invoker(-1, "b:1")])
    assert f"weight {-(2**40)}" in info.value.message and "#0" in info.value.message, info.value.message


def test_wrong_types_are_type_errors(lb: polylb.Balancer) -> None:
    with pytest.raises(TypeError):
        lb.update([Invoker("1", "10.0.0.1:20880")])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lb.update([Invoker(1, "10.0.0.1:20880", weight=1.5)])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lb.update([Invoker(1, 20880)])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lb.update([(1, "10.0.0.1:20880")])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        lb.select(key=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lb.select(method=1.0)  # type: ignore[arg-type]


def test_rejected_update_changes_nothing(lb: polylb.Balancer) -> None:
    for bad in (
        [Invoker(9, "a:1"), Invoker(9, "b:1")],
        [Invoker(9, "a:1", weight=-5)],
        [Invoker(9, b"\xff")],
    ):
        with pytest.raises(polylb.PolylbError):
            lb.update(bad)
    assert sorted(by_id(lb.stats())) == [1, 2, 3]


# -- select -----------------------------------------------------------------------------------


def test_empty_set_is_no_provider(balancer_factory: Any) -> None:
    fresh = balancer_factory()
    with pytest.raises(polylb.NoProviderError) as info:
        fresh.select()
    assert info.value.status is Status.NO_PROVIDER
    assert "no provider" in info.value.message
    fresh.update([])
    with pytest.raises(polylb.NoProviderError):
        fresh.select(among=[1])


def test_all_excluded_is_no_candidate(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.NoCandidateError):
        lb.select(exclude=[1, 2, 3])
    with pytest.raises(polylb.NoCandidateError):
        lb.select(among=[2], exclude=[2])


def test_unknown_candidate(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.UnknownCandidateError) as info:
        lb.select(among=[1, 99])
    assert isinstance(info.value, LookupError)
    with pytest.raises(polylb.UnknownCandidateError):
        lb.select(among=[-1])  # wraps to 2**64 - 1 in C: still not a member


def test_unknown_method(lb: polylb.Balancer) -> None:
    with pytest.raises(polylb.UnknownMethodError):
        lb.select(method=12345)
    with pytest.raises(polylb.UnknownMethodError):
        lb.report(1, 10, Outcome.SUCCESS, method=12345)
    with pytest.raises(polylb.UnknownMethodError):
        lb.report_provider_metrics(1, 1, 0.5, 10, method=12345)


def test_method_name_not_utf8(lb: polylb.Balancer) -> None:
    """The lookup returns a status only; the message is worded as the library words an address's,
    the same in every binding (bytes index; a lone surrogate as its three escaped bytes)."""
    with pytest.raises(polylb.InvalidUtf8Error) as bad_byte:
        lb.method(b"say\xffHello")
    assert str(bad_byte.value) == "method name is not valid UTF-8: invalid utf-8 sequence of 1 bytes from index 3"
    with pytest.raises(polylb.InvalidUtf8Error) as cut:
        lb.method(b"say\xe2\x82")
    assert str(cut.value) == "method name is not valid UTF-8: incomplete utf-8 byte sequence from index 3"
    with pytest.raises(polylb.InvalidUtf8Error) as surrogate:
        lb.method("\U0001f600say\udc00Hello")
    assert str(surrogate.value) == "method name is not valid UTF-8: invalid utf-8 sequence of 1 bytes from index 7"
    with pytest.raises(polylb.InvalidUtf8Error) as key:
        lb.select(key="k\ud800")
    assert str(key.value) == "key is not valid UTF-8: invalid utf-8 sequence of 1 bytes from index 1"
    with pytest.raises(TypeError):
        lb.method(42)  # type: ignore[arg-type]


def test_utf8_flaws_are_worded_as_the_library_words_them(lb: polylb.Balancer) -> None:
    """The binding's words for a bad method name against the library's for the same bytes as an
    address, over byte strings rich in the edges of UTF-8 (fixed seed)."""
    import random

    from polylb._arguments import utf8_flaw

    edges = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1]
    edges += [0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
    draw = random.Random(20261206)
    checked = 0
    while checked < 3000:
        data = bytes(draw.choice(edges) for _ in range(draw.randint(1, 6)))
        try:
            data.decode("utf-8")
            continue
        except UnicodeDecodeError:
            pass
        with pytest.raises(polylb.InvalidUtf8Error) as library:
            lb.update([Invoker(1, data)])
        assert str(library.value) == f"invoker #0 address is not valid UTF-8: {utf8_flaw(data)}", data
        checked += 1


# -- report -----------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", [4, -1, 1000])
def test_unknown_outcome(lb: polylb.Balancer, outcome: int) -> None:
    picked = lb.select()
    with pytest.raises(polylb.UnknownOutcomeError) as info:
        lb.report(picked, 10, outcome)
    assert info.value.status is Status.UNKNOWN_OUTCOME
    lb.report(picked, 10, Outcome.SUCCESS)


def test_negative_elapsed(lb: polylb.Balancer) -> None:
    picked = lb.select()
    with pytest.raises(polylb.InvalidArgumentError):
        lb.report(picked, -1, Outcome.SUCCESS)
    lb.report(picked, 0, Outcome.SUCCESS)


def test_an_invalid_argument_is_named(lb: polylb.Balancer) -> None:
    # The library's hot calls return a bare code; the binding names the argument it is about.
    picked = lb.select()
    with pytest.raises(polylb.InvalidArgumentError, match="elapsed_us = -5"):
        lb.report(picked, -5, Outcome.SUCCESS)
    with pytest.raises(polylb.InvalidArgumentError, match="elapsed_us"):
        lb.report(picked, 2**63, Outcome.SUCCESS)
    with pytest.raises(polylb.InvalidArgumentError, match="now_us"):
        lb.report(picked, 5, Outcome.SUCCESS, now_us=2**63)
    lb.report(picked, 5, Outcome.SUCCESS)
    with pytest.raises(polylb.InvalidArgumentError, match="cpu_load = nan"):
        lb.report_provider_metrics(1, 1, math.nan, 10)
    with pytest.raises(polylb.InvalidArgumentError, match="rt_us = -1"):
        lb.report_provider_metrics(1, 1, 0.5, -1)
    with pytest.raises(polylb.InvalidArgumentError, match="provider_time_ms"):
        lb.report_provider_metrics(1, 2**63, 0.5, 1)
    with pytest.raises(polylb.InvalidArgumentError, match="rt_us = -1"):  # a large load is valid
        lb.report_provider_metrics(1, 1, 1e19, -1)
    # Several bad: named in the Go and Java bindings' order (load, response time, provider
    # time), with the words they use for a double and for an int.
    with pytest.raises(polylb.InvalidArgumentError) as info:
        lb.report_provider_metrics(1, -1, -1, -1)
    assert info.value.message == "invalid argument: cpu_load = -1 (want finite and >= 0)"
    with pytest.raises(polylb.InvalidArgumentError) as info:
        lb.report_provider_metrics(1, -1, 0.5, -1)
    assert info.value.message == "invalid argument: rt_us = -1 (want >= 0)"
    with pytest.raises(polylb.InvalidArgumentError) as info:
        lb.report_provider_metrics(1, -1, 0.5, 1)
    assert info.value.message == "invalid argument: provider_time_ms = -1 (want >= 0)"
    # An int load is judged as the double it becomes: 10**19 is a load like any other.
    with pytest.raises(polylb.InvalidArgumentError) as info:
        lb.report_provider_metrics(1, -1, 10**19, 1)
    assert info.value.message == "invalid argument: provider_time_ms = -1 (want >= 0)"


@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_is_no_outcome(lb: polylb.Balancer, flag: bool) -> None:
    """bool is an int subclass: True would pass as FAILURE, False as SUCCESS. Go's and Java's
    types refuse it; report() does too, on the common path and the declared one alike."""
    picked = lb.select()
    with pytest.raises(TypeError, match="^outcome must be a polylb.Outcome or its int code, not bool$"):
        lb.report(picked, 5, flag)
    with pytest.raises(TypeError, match="^outcome must be a polylb.Outcome or its int code, not bool$"):
        lb.report(picked, 5, flag, now_us=1_700_000_000_000_000)
    row = by_id(lb.stats())[picked]
    assert (row["active"], row["succeeded"], row["failures"]) == (1, 0, 0)  # not ended
    lb.report(picked, 5, Outcome.SUCCESS)


@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_call_outcome_ends_the_call_as_cancelled_and_raises(lb: polylb.Balancer, flag: bool) -> None:
    with pytest.raises(TypeError, match="call.outcome must be a polylb.Outcome or its int code, not bool"):
        with lb.call() as call:
            call.outcome = flag  # bool is an int subclass: a type checker takes it too
    rows = lb.stats()["invokers"]
    assert [(r["active"], r["succeeded"], r["failures"]) for r in rows] == [(0, 0, 0)] * 3


def test_a_bool_id_or_time_is_refused_where_types_are_checked(lb: polylb.Balancer) -> None:
    """Where the binding checks the arguments' types (report() with an explicit clock or a
    value beyond the narrow call's range, report_provider_metrics(), report_load()), a bool id or
    time is a TypeError, as in Go and Java. report()'s common path takes it as its int (a check
    there would cost every report)."""
    now = 1_700_000_000_000_000
    picked = lb.select()
    calls = [
        ("id", lambda: lb.report(True, 5, Outcome.SUCCESS, now_us=now)),
        ("elapsed_us", lambda: lb.report(picked, True, Outcome.SUCCESS, now_us=now)),
        ("id", lambda: lb.report_provider_metrics(True, 1, 0.5, 10)),
        ("provider_time_ms", lambda: lb.report_provider_metrics(1, True, 0.5, 10)),
        ("rt_us", lambda: lb.report_provider_metrics(1, 1, 0.5, False)),
        ("id", lambda: lb.report_load(False, 10.0, 0.0, 0.5)),
    ]
    for name, call in calls:
        with pytest.raises(TypeError, match=f"^{name} must be an int, not bool$"):
            call()
    assert by_id(lb.stats())[picked]["active"] == 1  # no report ended the call
    lb.report(picked, 5, Outcome.SUCCESS)


@pytest.mark.parametrize("value", [2**63, 2**64, 2**70])
def test_a_time_above_int64_is_named_with_its_range(lb: polylb.Balancer, value: int) -> None:
    """An int time too large for its int64_t says the range it must be in, not ">= 0"."""
    picked = lb.select()
    with pytest.raises(polylb.InvalidArgumentError) as info:
        lb.report(picked, value, Outcome.SUCCESS)
    assert info.value.message == f"invalid argument: elapsed_us = {value} (want 0..2**63-1)"
    with pytest.raises(polylb.InvalidArgumentError) as info:
        lb.report_provider_metrics(1, 1, 0.5, value)
    assert info.value.message == f"invalid argument: rt_us = {value} (want 0..2**63-1)"
    with pytest.raises(polylb.InvalidArgumentError) as info:
        lb.report_provider_metrics(1, value, 0.5, 1)
    assert info.value.message == f"invalid argument: provider_time_ms = {value} (want 0..2**63-1)"
    lb.report(picked, 2**63 - 1, Outcome.SUCCESS)  # the end itself is a time


@pytest.mark.parametrize("ids", [["1"], [1.5], [None]])
@pytest.mark.parametrize("parameter", ["among", "exclude"])
def test_ids_of_a_wrong_type_name_the_parameter(lb: polylb.Balancer, parameter: str, ids: Any) -> None:
    with pytest.raises(TypeError, match=f"^{parameter}: "):
        lb.select(**{parameter: ids})


@pytest.mark.parametrize("ids", [b"\x01", bytearray(b"\x01"), "1"])
def test_text_and_bytes_are_not_id_lists(lb: polylb.Balancer, ids: Any) -> None:
    # Iterable, but bytes would read as a list of small ints: b"\x01" as [1].
    with pytest.raises(TypeError, match="^among: want a sequence of int ids"):
        lb.select(among=ids)


def test_non_integer_elapsed_is_a_type_error(lb: polylb.Balancer) -> None:
    with pytest.raises(TypeError):
        lb.report(1, 1.5, Outcome.SUCCESS)  # type: ignore[arg-type]


def test_wrong_types_are_type_errors_naming_the_parameter(lb: polylb.Balancer) -> None:
    calls = {
        "elapsed_us": lambda: lb.report(1, 1.5, Outcome.SUCCESS),  # type: ignore[arg-type]
        "provider_time_ms": lambda: lb.report_provider_metrics(1, 1.5, 0.5, 10),  # type: ignore[arg-type]
        "now_us": lambda: lb.stats(now_us=1.5),  # type: ignore[arg-type]
    }
    for parameter, call in calls.items():
        with pytest.raises(TypeError, match=parameter):
            call()
    with pytest.raises(TypeError, match="now_us"):
        lb.stats(now_us="0")  # type: ignore[arg-type]
    # 0.0 == 0, the library's clock: still a float, refused by every call alike (the narrow
    # calls of select and report once skipped the check for it).
    for call in (
        lambda: lb.select(now_us=0.0),  # type: ignore[arg-type]
        lambda: lb.report(1, 5, Outcome.SUCCESS, now_us=0.0),  # type: ignore[arg-type]
        lambda: lb.stats(now_us=0.0),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match="now_us"):
            call()
    picked = lb.select(now_us=False)  # an int, as everywhere
    lb.report(picked, 5, Outcome.CANCELLED, now_us=False)
    assert all(row["active"] == 0 for row in lb.stats()["invokers"])


@pytest.mark.parametrize(
    "args",
    [
        (1, math.nan, 10),
        (1, -0.1, 10),
        (1, math.inf, 10),
        (1, 0.5, -1),
        (-1, 0.5, 10),
    ],
)
def test_bad_provider_metrics(lb: polylb.Balancer, args: Any) -> None:
    provider_time_ms, cpu_load, rt_us = args
    with pytest.raises(polylb.InvalidArgumentError):
        lb.report_provider_metrics(1, provider_time_ms, cpu_load, rt_us)


# -- limits -----------------------------------------------------------------------------------


def test_too_many_methods(balancer_factory: Any) -> None:
    lb = balancer_factory()
    # Interning as bytes skips the binding's name cache, keeping this test fast and lean.
    with pytest.raises(polylb.LimitExceededError):
        for i in range(1, (1 << 20) + 2):
            lb.method(b"m%d" % i)
    assert lb.method("") == 0  # still usable


# -- the exception classes themselves ---------------------------------------------------------


def test_every_status_has_its_class() -> None:
    for status in Status:
        if status is Status.OK:
            continue
        error = polylb._errors.error_for(status)
        assert type(error) is not polylb.PolylbError, status
        assert error.status is status
        assert error.message == polylb._ffi.status_text(status)


def test_unknown_status_keeps_its_number() -> None:
    error = polylb._errors.error_for(99)
    assert type(error) is polylb.PolylbError
    assert error.status == 99
    assert "99" in repr(error)


# -- ints beyond their C types ----------------------------------------------------------------
# ctypes wraps an int that does not fit its C type (2**32 + m into m) without a word: each must
# instead keep its meaning, as it does in Go and Java, whose types cannot hold such values.


def test_method_ids_beyond_32_bits_are_unknown(lb: polylb.Balancer) -> None:
    m = lb.method("sayHello")
    for bad in (2**32 + m, m - 2**32, -1):
        with pytest.raises(polylb.UnknownMethodError):
            lb.select(method=bad)
        with pytest.raises(polylb.UnknownMethodError):
            lb.select(method=bad, now_us=1)
        with pytest.raises(polylb.UnknownMethodError):
            lb.select(method=bad, among=[1])
        with pytest.raises(polylb.UnknownMethodError):
            lb.report(1, 10, Outcome.SUCCESS, method=bad)
    assert all(row["active"] == 0 for row in lb.stats()["invokers"])


def test_times_beyond_64_bits_are_invalid(lb: polylb.Balancer) -> None:
    picked = lb.select()
    for elapsed in (2**64 + 5, 2**63):
        with pytest.raises(polylb.InvalidArgumentError):
            lb.report(picked, elapsed, Outcome.SUCCESS)
    with pytest.raises(polylb.InvalidArgumentError):
        lb.report(picked, 5, Outcome.SUCCESS, now_us=2**64)
    assert by_id(lb.stats())[picked]["active"] == 1  # none of them ended the call
    lb.report(picked, 5, Outcome.SUCCESS)
    for now_us in (2**64, -(2**63) - 1):
        with pytest.raises(polylb.InvalidArgumentError):
            lb.select(now_us=now_us)
        with pytest.raises(polylb.InvalidArgumentError):
            lb.select(among=[1], now_us=now_us)
    assert all(row["active"] == 0 for row in lb.stats()["invokers"])


def test_a_clock_beyond_64_bits_is_named_the_same_way_by_every_call(lb: polylb.Balancer) -> None:
    # The first int past each end of int64, in select (plain and among), report and stats:
    # one message naming the argument and its value, as report's always did.
    for now_us in (2**63, -(2**63) - 1):
        message = f"invalid argument: now_us = {now_us} (want an int64 clock)"
        calls = (
            lambda: lb.select(now_us=now_us),
            lambda: lb.select(among=[1], now_us=now_us),
            lambda: lb.report(1, 5, Outcome.SUCCESS, now_us=now_us),
            lambda: lb.stats(now_us=now_us),
        )
        for call in calls:
            with pytest.raises(polylb.InvalidArgumentError) as e:
                call()
            assert str(e.value) == message
    for now_us in (2**63 - 1, -(2**63)):  # the ends themselves are times
        lb.report(lb.select(now_us=now_us), 5, Outcome.SUCCESS, now_us=now_us)
        assert lb.stats(now_us=now_us)["invokers"]


def test_provider_metrics_and_stats_ints_are_not_wrapped(balancer_factory: Any) -> None:
    lb: polylb.Balancer = balancer_factory("adaptive")
    lb.update(invokers(2))
    m = lb.method("sayHello")
    for bad in (2**32 + m, m - 2**32):
        with pytest.raises(polylb.UnknownMethodError):
            lb.report_provider_metrics(1, 1, 0.5, 10, method=bad)
    for provider_time_ms, rt_us, now_us in ((2**64 + 1, 10, 0), (1, 2**64 + 10, 0), (1, 10, 2**64 + 1)):
        with pytest.raises(polylb.InvalidArgumentError):
            lb.report_provider_metrics(1, provider_time_ms, 0.5, rt_us, now_us=now_us)
    for now_us in (2**64, -(2**63) - 1):
        with pytest.raises(polylb.InvalidArgumentError):
            lb.stats(now_us=now_us)


def test_ids_beyond_64_bits_name_no_invoker(lb: polylb.Balancer) -> None:
    picked = lb.select()
    # A report for an id no invoker has is ignored: it must not end the call of `picked`.
    for alias in (picked - 2**64, picked + 2**64):
        lb.report(alias, 7, Outcome.SUCCESS)
    assert by_id(lb.stats())[picked]["active"] == 1
    lb.report(picked, 7, Outcome.SUCCESS)
    with pytest.raises(polylb.UnknownCandidateError):
        lb.select(among=[1 + 2**64])
    with pytest.raises(polylb.UnknownCandidateError):
        lb.select(among=polylb.id_array([1 - 2**64]))
    # Exclusions of ids no invoker has exclude nothing (wrapped, they would exclude 1, 2, 3).
    seen = {lb.select(exclude=[1 + 2**64, 2 + 2**64, 3 - 2**64]) for _ in range(30)}
    assert seen == {1, 2, 3}
    for id in seen:
        for _ in range(10):
            lb.report(id, 1, Outcome.SUCCESS)


def test_reports_for_ids_beyond_64_bits_check_everything_else(lb: polylb.Balancer, balancer_factory: Any) -> None:
    # Such an id names no invoker, as 2**64 - 1 does in Go and -1 in Java; the report is still
    # checked as theirs are: unknown method, negative elapsed time, closed balancer.
    for alias in (-1, 2**64 + 1):
        with pytest.raises(polylb.UnknownMethodError):
            lb.report(alias, 10, Outcome.SUCCESS, method=12345)
        with pytest.raises(polylb.InvalidArgumentError):
            lb.report(alias, -5, Outcome.SUCCESS)
        lb.report(alias, 10, Outcome.SUCCESS)  # otherwise accepted and ignored
    closed: polylb.Balancer = balancer_factory("random")
    closed.close()
    for alias in (-1, 2**64 + 1):
        with pytest.raises(polylb.BalancerClosedError):
            closed.report(alias, 10, Outcome.SUCCESS)


def test_call_keeps_the_blocks_exception_when_closed_meanwhile(balancer_factory: Any) -> None:
    balancer: polylb.Balancer = balancer_factory("random")
    balancer.update(invokers(2))
    with pytest.raises(ConnectionError, match="refused"):
        with balancer.call():
            balancer.close()  # e.g. a shutdown on another thread
            raise ConnectionError("provider refused")
    other: polylb.Balancer = balancer_factory("random")
    other.update(invokers(2))
    with pytest.raises(polylb.BalancerClosedError):
        with other.call():
            other.close()


class _Index:
    """An integer that is not an int, as NumPy's are: ctypes takes it through ``__index__``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_ints_that_are_not_plain_ints_are_range_checked_as_ints(balancer_factory: Any) -> None:
    # An int subclass (an IntEnum member) or an __index__ object outside its C type would be
    # wrapped by ctypes onto a valid value (2**64 + 5 onto invoker 5, 2**32 + 1 onto FAILURE):
    # each is checked as the plain int is.
    import enum

    class Big(enum.IntEnum):
        ID = 2**64 + 5
        OUTCOME = 2**32 + 1
        TIME = 2**64

    for big_id in (Big.ID, _Index(2**64 + 5)):
        lb: polylb.Balancer = balancer_factory("random", seed=3)
        lb.update(invokers(5))
        lb.report(big_id, 10, Outcome.SUCCESS)  # names no invoker: ignored
        lb.report(big_id, 10, Outcome.FAILURE)
        row = by_id(lb.stats())[5]
        assert (row["succeeded"], row["failures"]) == (0, 0)
    lb = balancer_factory("random", seed=3)
    lb.update(invokers(5))
    picked = lb.select()
    for outcome in (Big.OUTCOME, _Index(2**32 + 1)):
        with pytest.raises(polylb.UnknownOutcomeError):
            lb.report(picked, 10, outcome)  # type: ignore[arg-type]
    for time in (Big.TIME, _Index(2**64)):
        with pytest.raises(polylb.InvalidArgumentError):
            lb.report(picked, time, Outcome.SUCCESS)  # type: ignore[arg-type]
        with pytest.raises(polylb.InvalidArgumentError):
            lb.report(picked, 10, Outcome.SUCCESS, now_us=time)  # type: ignore[arg-type]
        with pytest.raises(polylb.InvalidArgumentError):
            lb.select(now_us=time)  # type: ignore[arg-type]
    assert by_id(lb.stats())[picked]["active"] == 1  # none of them ended the call
    lb.report(picked, _Index(10), Outcome.SUCCESS)  # type: ignore[arg-type]
    assert by_id(lb.stats())[picked]["succeeded"] == 1

    adaptive: polylb.Balancer = balancer_factory("adaptive")
    adaptive.update(invokers(5))
    adaptive.report_provider_metrics(Big.ID, 1, 0.9, 10)  # names no invoker: ignored
    assert by_id(adaptive.stats())[5]["methods"] == []
    orca: polylb.Balancer = balancer_factory("orca", orca_blackoutMs=0)
    orca.update(invokers(5))
    orca.report_load(Big.ID, 100.0, 0.0, 0.5)
    assert by_id(orca.stats())[5]["orca_weight"] is None
    orca.report_load(5, 100.0, 0.0, 0.5)  # the same report for invoker 5 itself weighs it
    assert by_id(orca.stats())[5]["orca_weight"] == 200


def test_methods_that_are_not_plain_ints_are_ids(balancer_factory: Any) -> None:
    # A method id as NumPy's integers give it (__index__) is an id like the int, as every
    # other int argument takes them; outside 32 bits it names no method.
    lb: polylb.Balancer = balancer_factory("roundrobin")
    lb.update(invokers(3))
    method = lb.method("sayHello")
    picked = lb.select(method=_Index(method))  # type: ignore[arg-type]
    lb.report(picked, 10, Outcome.SUCCESS, method=_Index(method))  # type: ignore[arg-type]
    with lb.call(method=_Index(method)) as call:  # type: ignore[arg-type]
        assert call.id in (1, 2, 3)
    assert sum(row["selected"] for row in lb.stats()["invokers"]) == 2
    assert sum(row["active"] for row in lb.stats()["invokers"]) == 0
    with pytest.raises(polylb.UnknownMethodError):
        lb.select(method=_Index(2**32 + method))  # type: ignore[arg-type]
    with pytest.raises(polylb.UnknownMethodError):
        lb.report(picked, 10, Outcome.SUCCESS, method=_Index(2**32))  # type: ignore[arg-type]


def test_invoker_fields_that_are_not_plain_ints_are_ints(lb: polylb.Balancer) -> None:
    lb.update([Invoker(_Index(7), "10.0.0.7:20880", weight=_Index(5), start_time_ms=_Index(0), warmup_ms=_Index(-1))])  # type: ignore[arg-type]
    row = by_id(lb.stats())[7]
    assert row["weight"] == 5
    assert lb.select() == 7
    lb.report(7, 10, Outcome.SUCCESS)
    with pytest.raises(polylb.NegativeWeightError, match=r"weight -(2\*\*40|1099511627776) is negative"):
        lb.update([Invoker(_Index(8), "a:1", weight=_Index(-(2**40)))])  # type: ignore[arg-type]
    with pytest.raises(polylb.IdOutOfRangeError, match="is outside"):
        lb.update([Invoker(_Index(-1), "a:1")])  # type: ignore[arg-type]
    with pytest.raises(polylb.InvalidArgumentError, match="warmup_ms"):
        lb.update([Invoker(9, "a:1", warmup_ms=_Index(2**31))])  # type: ignore[arg-type]
    assert list(by_id(lb.stats())) == [7], "a rejected update changes nothing"


def test_bad_numbers_not_plain_ints_are_named(lb: polylb.Balancer) -> None:
    picked = lb.select()
    with pytest.raises(polylb.InvalidArgumentError, match=r"elapsed_us = -1 \(want"):
        lb.report(picked, _Index(-1), Outcome.SUCCESS)  # type: ignore[arg-type]
    with pytest.raises(polylb.InvalidArgumentError, match=r"now_us = 9223372036854775808 \(want"):
        lb.select(now_us=_Index(2**63))  # type: ignore[arg-type]
    lb.report(picked, 10, Outcome.SUCCESS)


def test_configs_and_sets_of_a_wrong_type_are_type_errors_naming_them() -> None:
    for config in ([("loadbalance", "random")], bytearray(b"loadbalance=random"), 5):
        with pytest.raises(TypeError, match="config must be"):
            polylb.Balancer(config=config)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config keys must be str, not int"):
        polylb.Balancer(config={1: 2})  # type: ignore[dict-item]
    with polylb.Balancer("random") as lb:
        lb.update(invokers(2))
        with pytest.raises(TypeError, match="update\\(\\) takes an iterable of Invoker objects, not NoneType"):
            lb.update(None)  # type: ignore[arg-type]
        assert len(lb.stats()["invokers"]) == 2


def test_type_errors_name_the_parameter_in_every_python_versions_wording() -> None:
    # ctypes words a conversion error "TypeError: wrong type" from Python 3.11 on and
    # "<class 'TypeError'>: wrong type" before.
    from polylb._arguments import _REPORT_PARAMS, _type_error

    for text in ("argument 5: TypeError: wrong type", "argument 5: <class 'TypeError'>: wrong type"):
        error = _type_error(ctypes.ArgumentError(text), _REPORT_PARAMS)
        assert str(error) == "outcome: wrong type", text


def test_an_int_too_large_for_a_double_is_an_invalid_argument(balancer_factory: Any) -> None:
    orca: polylb.Balancer = balancer_factory("orca")
    orca.update(invokers(2))
    for name in ("qps", "eps", "utilization"):
        numbers = {"qps": 100.0, "eps": 0.0, "utilization": 0.5, name: 10**400}
        with pytest.raises(polylb.InvalidArgumentError, match=name):
            orca.report_load(1, **numbers)
    adaptive: polylb.Balancer = balancer_factory("adaptive")
    adaptive.update(invokers(2))
    with pytest.raises(polylb.InvalidArgumentError, match="cpu_load"):
        adaptive.report_provider_metrics(1, 1, 10**400, 10)  # type: ignore[arg-type]
    adaptive.report_provider_metrics(1, 1, 1, 10)  # an int that fits is a load like any other
    # Closed, the balancer says so first, as for any other argument.
    orca.close()
    adaptive.close()
    with pytest.raises(polylb.BalancerClosedError):
        orca.report_load(1, 10**400, 0.0, 0.5)  # type: ignore[arg-type]
    with pytest.raises(polylb.BalancerClosedError):
        adaptive.report_provider_metrics(1, 1, 10**400, 10)  # type: ignore[arg-type]


def test_errors_survive_pickle_and_copy() -> None:
    import copy
    import pickle

    errors = [
        polylb.NoProviderError(Status.NO_PROVIDER, "no provider: the invoker set is empty"),
        polylb.BalancerClosedError(),
        polylb.PolylbError(999, "a code newer than this binding"),
    ]
    for error in errors:
        for clone in (copy.copy(error), pickle.loads(pickle.dumps(error))):
            assert type(clone) is type(error)
            assert (clone.status, clone.message, str(clone)) == (error.status, error.message, str(error))
