"""The C ABI's edge rules (docs/abi-contract.md), exercised through the raw ctypes declarations.

The Pythonic API never produces most of these calls (NULL pointers with lengths, tiny buffers),
but the binding relies on the rules holding: e.g. use-after-close passes a NULL handle and
expects NULL_POINTER back rather than a crash, and stats() sizes its buffer from *len.
"""

from __future__ import annotations

import ctypes
import json
from ctypes import byref, c_size_t, c_uint32, c_uint64, c_void_p, create_string_buffer
from typing import Iterator

import pytest

import polylb
from conftest import invokers
from polylb import Status
from polylb._ffi import lib


@pytest.fixture
def handle() -> Iterator[int]:
    lb = polylb.Balancer("roundrobin")
    lb.update(invokers(3))
    assert lb._handle is not None
    yield lb._handle
    lb.close()


def test_null_handle_is_an_error_everywhere() -> None:
    out = c_uint32()
    length = c_size_t()
    assert lib.plb_select(None, 0, None, 0, 0) == -Status.NULL_POINTER
    assert lib.plb_select_among(None, 0, None, 0, None, 0, None, 0, 0) == -Status.NULL_POINTER
    assert lib.plb_report(None, 0, 1, 10, 0, 0) == Status.NULL_POINTER
    assert lib.plb_report_provider_metrics(None, 0, 1, 1, 0.5, 10, 0) == Status.NULL_POINTER
    assert lib.plb_report_load(None, 1, 100.0, 0.0, 0.5, 0) == Status.NULL_POINTER
    assert lib.plb_report_reconnect(None, 1, 0) == Status.NULL_POINTER
    assert lib.plb_balancer_method(None, b"m", 1, byref(out)) == Status.NULL_POINTER
    assert lib.plb_balancer_stats(None, 0, None, 0, byref(length)) == Status.NULL_POINTER
    assert lib.plb_balancer_update(None, None, 0, None, 0, None) == Status.NULL_POINTER
    lib.plb_balancer_free(None)  # a no-op


def test_null_data_with_length_is_an_error(handle: int) -> None:
    assert lib.plb_select(handle, 0, None, 5, 0) == -Status.NULL_POINTER
    assert lib.plb_select_among(handle, 0, None, 0, None, 2, None, 0, 0) == -Status.NULL_POINTER
    assert lib.plb_select_among(handle, 0, None, 0, None, 0, None, 2, 0) == -Status.NULL_POINTER
    assert lib.plb_balancer_update(handle, None, 2, None, 0, None) == Status.NULL_POINTER
    assert lib.plb_balancer_method(handle, None, 3, byref(c_uint32())) == Status.NULL_POINTER
    assert lib.plb_balancer_method(handle, b"m", 1, None) == Status.NULL_POINTER
    out = c_void_p()
    assert lib.plb_balancer_new(None, 4, byref(out), None, 0, None) == Status.NULL_POINTER
    assert lib.plb_balancer_new(b"", 0, None, None, 0, None) == Status.NULL_POINTER


def test_any_pointer_with_length_zero_means_all(handle: int) -> None:
    dangling = (c_uint64 * 1)(999)  # not a member: ignored because the length is 0
    picks = {lib.plb_select_among(handle, 0, None, 0, dangling, 0, dangling, 0, 0) for _ in range(6)}
    assert picks == {1, 2, 3}


def test_null_invokers_with_zero_length_is_the_empty_set(handle: int) -> None:
    assert lib.plb_balancer_update(handle, None, 0, None, 0, None) == Status.OK
    assert lib.plb_select(handle, 0, None, 0, 0) == -Status.NO_PROVIDER


def test_error_message_is_truncated_with_a_nul() -> None:
    out = c_void_p()
    message = create_string_buffer(b"\xaa" * 10)
    length = c_size_t(12345)
    status = lib.plb_balancer_new(b"frobnicate=1", 12, byref(out), message, 10, byref(length))
    assert status == Status.INVALID_CONFIG and not out.value
    assert length.value == 9  # what was written, without the NUL
    assert message.raw[9] == 0 and b"\x00" not in message.raw[:9]
    # a zero capacity writes nothing, and is not an error in itself
    untouched = create_string_buffer(b"\xaa" * 4)
    status = lib.plb_balancer_new(b"frobnicate=1", 12, byref(out), untouched, 0, byref(length))
    assert status == Status.INVALID_CONFIG and untouched.raw == b"\xaa" * 4 + b"\x00"


def test_success_writes_an_empty_message() -> None:
    out = c_void_p()
    message = create_string_buffer(b"\xaa" * 8)
    length = c_size_t(99)
    assert lib.plb_balancer_new(b"", 0, byref(out), message, 8, byref(length)) == Status.OK
    try:
        assert out.value and length.value == 0 and message.raw[0] == 0
    finally:
        lib.plb_balancer_free(out.value)


def test_stats_buffer_protocol(handle: int) -> None:
    needed = c_size_t()
    assert lib.plb_balancer_stats(handle, 0, None, 0, byref(needed)) == Status.BUFFER_TOO_SMALL
    size = needed.value
    assert size > 0
    exact = create_string_buffer(size)  # no room for the NUL: still too small
    assert lib.plb_balancer_stats(handle, 0, exact, size, byref(needed)) == Status.BUFFER_TOO_SMALL
    assert needed.value == size
    enough = create_string_buffer(size + 1)
    written = c_size_t()
    assert lib.plb_balancer_stats(handle, 0, enough, size + 1, byref(written)) == Status.OK
    assert written.value == size and enough.raw[size] == 0
    assert json.loads(enough.raw[:size])["strategy"] == "roundrobin"
    assert lib.plb_balancer_stats(handle, 0, enough, size + 1, None) == Status.NULL_POINTER


def test_status_text_never_null() -> None:
    for code in (0, 1, 15, 16, -1, -15, -16, 2**31 - 1, -(2**31)):
        text = lib.plb_status_str(code)
        assert isinstance(text, bytes) and text


def test_versions() -> None:
    assert lib.plb_abi_version() == polylb.ABI_VERSION
    version = lib.plb_version()
    assert isinstance(version, bytes) and version.count(b".") >= 2


def test_select_returns_negated_status(handle: int) -> None:
    assert lib.plb_select(handle, 4242, None, 0, 0) == -Status.UNKNOWN_METHOD
    assert lib.plb_report(handle, 0, 1, 10, 9, 0) == Status.UNKNOWN_OUTCOME


def test_ids_above_int64_max_are_rejected_by_the_library(handle: int) -> None:
    entry = polylb._ffi.PlbInvoker(2**63, b"a:1", 3, 100, 0, -1, None, 0)
    array = (polylb._ffi.PlbInvoker * 1)(entry)
    assert lib.plb_balancer_update(handle, array, 1, None, 0, None) == Status.ID_OUT_OF_RANGE
    assert ctypes.sizeof(array) == ctypes.sizeof(polylb._ffi.PlbInvoker)


def test_packed_invoker_arrays_read_as_ctypes_built_ones() -> None:
    # update() packs its array with struct; a field at the wrong offset or of the wrong size
    # would hand the library another set than the caller's.
    rows = [
        (2**64 - 1, b"10.0.0.1:20880", -(2**31), -(2**63), 2**31 - 1, None),
        (7, b"a\x00b:1", 2**31 - 1, 2**63 - 1, -(2**31), b"zone-\xe2\x82\xac"),
        (0, b"", 0, 0, 0, b""),
    ]
    packed, text = polylb._ffi.invoker_array(rows)
    assert len(packed) == len(rows)
    base = ctypes.cast(ctypes.c_char_p(text), c_void_p).value
    for entry, (id, address, weight, start_time_ms, warmup_ms, zone) in zip(packed, rows):
        raw = ctypes.cast(ctypes.addressof(entry) + polylb._ffi.PlbInvoker.address.offset, ctypes.POINTER(c_void_p))
        assert base <= raw.contents.value <= base + len(text)
        assert ctypes.string_at(raw.contents.value, entry.address_len) == address
        assert (entry.id, entry.weight, entry.start_time_ms, entry.warmup_ms) == (id, weight, start_time_ms, warmup_ms)
        if zone is None:
            assert entry.zone is None and entry.zone_len == 0
        else:
            zone_at = ctypes.cast(ctypes.addressof(entry) + polylb._ffi.PlbInvoker.zone.offset, ctypes.POINTER(c_void_p))
            assert ctypes.string_at(zone_at.contents.value, entry.zone_len) == zone
    built = polylb._ffi.PlbInvoker(7, None, 5, 2**31 - 1, 2**63 - 1, -(2**31), None, 8)
    assert ctypes.sizeof(packed) == 3 * ctypes.sizeof(built)
    # Every byte but the two pointers (which point into different buffers) matches ctypes' own.
    pointers = {polylb._ffi.PlbInvoker.address.offset, polylb._ffi.PlbInvoker.zone.offset}
    size = ctypes.sizeof(built)
    mine = bytes(packed)[size : 2 * size]
    theirs = bytes(built)
    for offset in range(0, size, 8):
        if offset not in pointers:
            assert mine[offset : offset + 8] == theirs[offset : offset + 8], offset
