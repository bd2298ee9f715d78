"""Finding libpolylb, checking its ABI version and declaring every C symbol for ctypes.

Everything the rest of the package knows about the C ABI lives in this module: the status and
outcome numbers, the ``plb_invoker`` struct layout and one table, ``PROTOTYPES``, that gives the
return and argument types of each exported function. ``tests/test_header.py`` parses
``include/polylb.h`` and compares it with these declarations, so the two cannot drift apart.
"""

from __future__ import annotations

import ctypes
import enum
import os
import struct
import sys
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_double,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

#: The C ABI version this binding was written for (``PLB_ABI_VERSION``).
ABI_VERSION = 1

#: Environment variable naming a libpolylb to load instead of the bundled one.
LIBRARY_ENV = "POLYLB_LIBRARY"


class Status(enum.IntEnum):
    """The library's status codes (``PLB_OK`` and ``PLB_ERR_*``); stable, never renumbered."""

    OK = 0
    NULL_POINTER = 1
    INVALID_UTF8 = 2
    INVALID_CONFIG = 3
    NEGATIVE_WEIGHT = 4
    DUPLICATE_ID = 5
    ID_OUT_OF_RANGE = 6
    NO_PROVIDER = 7
    NO_CANDIDATE = 8
    UNKNOWN_CANDIDATE = 9
    UNKNOWN_METHOD = 10
    UNKNOWN_OUTCOME = 11
    BUFFER_TOO_SMALL = 12
    PANIC = 13
    INVALID_ARGUMENT = 14
    LIMIT_EXCEEDED = 15


class Outcome(enum.IntEnum):
    """How a call ended (``PLB_OUTCOME_*``), as given to :meth:`polylb.Balancer.report`: a verdict
    on the provider, not on the request (docs/outcomes.md maps gRPC and HTTP statuses)."""

    #: The provider answered, also with an error of the service's own (a business exception, a
    #: gRPC NOT_FOUND, an HTTP 404): its latency feeds the latency-aware strategies.
    SUCCESS = 0
    #: The provider could not serve (refused, reset, unavailable, overloaded, broken).
    FAILURE = 1
    #: The caller's deadline passed before the answer: a failure, also counted as a timeout.
    TIMEOUT = 2
    #: The call was never sent, or was given up with no verdict on the provider: only the
    #: in-flight count is undone, no latency or failure is recorded.
    CANCELLED = 3


def header_constant_names() -> Dict[str, int]:
    """Every ``#define`` this module mirrors, by its C name (used by the header drift test)."""
    names = {"PLB_ABI_VERSION": ABI_VERSION}
    for status in Status:
        names["PLB_OK" if status is Status.OK else "PLB_ERR_" + status.name] = int(status)
    for outcome in Outcome:
        names["PLB_OUTCOME_" + outcome.name] = int(outcome)
    return names


class PlbInvoker(Structure):
    """``struct plb_invoker``: one provider as handed to ``plb_balancer_update``.

    The byte strings are referenced, not copied, by ctypes (it keeps them alive in the struct's
    ``_objects``); the library copies what it keeps, so they only need to live for the call.
    """

    _fields_ = [
        ("id", c_uint64),
        ("address", c_char_p),
        ("address_len", c_size_t),
        ("weight", c_int32),
        ("start_time_ms", c_int64),
        ("warmup_ms", c_int32),
        ("zone", c_char_p),
        ("zone_len", c_size_t),
    ]


def _packed_layout(structure: Any) -> "struct.Struct":
    """A ``struct`` format laid out byte for byte as ctypes lays out ``structure`` (its offsets,
    its padding, its size), from its ``_fields_``: packing a record is several times cheaper than
    building a ctypes Structure, which matters for sets of 100,000 invokers."""
    codes = []
    position = 0
    for name, kind in structure._fields_:
        size = ctypes.sizeof(kind)
        signed = kind in (c_int32, c_int64)
        code = {4: "i", 8: "q"}[size] if signed else {4: "I", 8: "Q"}[size]
        offset = getattr(structure, name).offset
        codes.append(f"{offset - position}x" if offset > position else "")
        codes.append(code)
        position = offset + size
    codes.append(f"{ctypes.sizeof(structure) - position}x")
    return struct.Struct("=" + "".join(codes))


_INVOKER_RECORD = _packed_layout(PlbInvoker)


def invoker_array(
    rows: Sequence[Tuple[int, bytes, int, int, int, Optional[bytes]]],
) -> Tuple["ctypes.Array[PlbInvoker]", bytes]:
    """A C ``plb_invoker[]`` of checked rows ``(id, address, weight, start_time_ms, warmup_ms,
    zone or None)``, with the bytes its pointers point into: keep those alive for the call."""
    texts: List[bytes] = []
    for row in rows:
        texts.append(row[1])
        if row[5] is not None:
            texts.append(row[5])
    text = b"".join(texts)
    base = ctypes.cast(c_char_p(text), c_void_p).value or 0
    record = _INVOKER_RECORD
    buffer = bytearray(record.size * len(rows))
    pack_into, offset, position = record.pack_into, 0, base
    for id, address, weight, start_time_ms, warmup_ms, zone in rows:
        end = position + len(address)
        if zone is None:
            pack_into(buffer, offset, id, position, len(address), weight, start_time_ms, warmup_ms, 0, 0)
            position = end
        else:
            pack_into(buffer, offset, id, position, len(address), weight, start_time_ms, warmup_ms, end, len(zone))
            position = end + len(zone)
        offset += record.size
    return (PlbInvoker * len(rows)).from_buffer(buffer), text


# How C parameter types are spelled in ctypes here:
#   const plb_balancer *            -> c_void_p (an opaque address kept as a Python int)
#   plb_balancer **                 -> POINTER(c_void_p)
#   const uint8_t *, size_t         -> c_char_p, c_size_t: a bytes object is passed without a copy;
#                                      the length travels separately, so embedded NULs are fine
#   char *err / char *buf (output)  -> c_char_p, given a ctypes.create_string_buffer
#   const uint64_t * (id arrays)    -> POINTER(c_uint64), given a (c_uint64 * n) array or None
_HANDLE = c_void_p
_BYTES = c_char_p
_OUT_TEXT = c_char_p

PROTOTYPES: Dict[str, Tuple[Any, Tuple[Any, ...]]] = {
    "plb_balancer_new": (
        c_int32,
        (_BYTES, c_size_t, POINTER(c_void_p), _OUT_TEXT, c_size_t, POINTER(c_size_t)),
    ),
    "plb_balancer_free": (None, (_HANDLE,)),
    "plb_balancer_update": (
        c_int32,
        (_HANDLE, POINTER(PlbInvoker), c_size_t, _OUT_TEXT, c_size_t, POINTER(c_size_t)),
    ),
    "plb_balancer_method": (c_int32, (_HANDLE, _BYTES, c_size_t, POINTER(c_uint32))),
    "plb_balancer_stats": (c_int32, (_HANDLE, c_int64, _OUT_TEXT, c_size_t, POINTER(c_size_t))),
    "plb_select": (c_int64, (_HANDLE, c_uint32, _BYTES, c_size_t, c_int64)),
    "plb_select_among": (
        c_int64,
        (
            _HANDLE,
            c_uint32,
            _BYTES,
            c_size_t,
            POINTER(c_uint64),
            c_size_t,
            POINTER(c_uint64),
            c_size_t,
            c_int64,
        ),
    ),
    "plb_report": (c_int32, (_HANDLE, c_uint32, c_uint64, c_int64, c_int32, c_int64)),
    "plb_select32": (c_int64, (_HANDLE, c_uint32, _BYTES, c_uint32)),
    "plb_report32": (c_int32, (_HANDLE, c_uint32, c_uint32, c_uint32, c_uint32, c_int32)),
    "plb_report_provider_metrics": (
        c_int32,
        (_HANDLE, c_uint32, c_uint64, c_int64, c_double, c_int64, c_int64),
    ),
    "plb_report_load": (c_int32, (_HANDLE, c_uint64, c_double, c_double, c_double, c_int64)),
    "plb_report_reconnect": (c_int32, (_HANDLE, c_uint64, c_int64)),
    "plb_status_str": (c_char_p, (c_int32,)),
    "plb_version": (c_char_p, ()),
    "plb_abi_version": (c_uint32, ()),
}


def library_filename() -> str:
    """The shared library's file name on this platform (what cargo produces)."""
    if sys.platform == "darwin":
        return "libpolylb.dylib"
    if sys.platform == "win32":
        return "polylb.dll"
    return "libpolylb.so"


def candidate_paths() -> List[Path]:
    """Where the library is looked for, in order (the environment override is handled apart).

    1. next to this file: where ``pip install`` puts the copy it bundles;
    2. ``target/release`` of the repository this source tree sits in (bindings/python/polylb/..),
       so tests and experiments work from a checkout after ``cargo build --release``.
    """
    here = Path(__file__).resolve().parent
    name = library_filename()
    paths = [here / name]
    repo = here.parent.parent.parent
    if (repo / "Cargo.toml").is_file():
        target = Path(os.environ.get("CARGO_TARGET_DIR") or repo / "target")
        if not target.is_absolute():
            target = repo / target
        paths.append(target / "release" / name)
    return paths


def _find_library() -> Path:
    override = os.environ.get(LIBRARY_ENV)
    if override:
        # An explicit override that points nowhere is a mistake worth stopping for, not a hint
        # to silently load some other copy.
        path = Path(override)
        if not path.is_file():
            raise ImportError(f"{LIBRARY_ENV}={override!r} does not name a file")
        # Absolute: dlopen looks a name without a '/' up on the system's search path, not in
        # the current directory, and would load another copy, or none.
        return path.resolve()
    tried = candidate_paths()
    for path in tried:
        if path.is_file():
            return path
    raise ImportError(
        "libpolylb not found; looked at: "
        + ", ".join(str(p) for p in tried)
        + f". Install the package with `pip install ./bindings/python`, run `cargo build --release`"
        f" in the repository, or set {LIBRARY_ENV} to the library's path."
    )


def _declare(lib: ctypes.CDLL, path: Path) -> None:
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            raise ImportError(
                f"{path} does not export {name}: it is not the libpolylb this binding expects"
            ) from None
        function.restype = restype
        function.argtypes = list(argtypes)


def _load() -> Tuple[ctypes.CDLL, Path]:
    path = _find_library()
    try:
        # CDLL (not PyDLL) releases the GIL during each call, so threads select concurrently.
        lib = ctypes.CDLL(str(path))
    except OSError as error:
        raise ImportError(f"cannot load {path}: {error}") from error
    # Check the ABI version before trusting any other declaration: a mismatched library could
    # have different struct layouts, and calling into it would corrupt memory instead of failing.
    try:
        abi_version = lib.plb_abi_version
    except AttributeError:
        raise ImportError(f"{path} does not export plb_abi_version: not a libpolylb") from None
    abi_version.restype = c_uint32
    abi_version.argtypes = []
    found = abi_version()
    if found != ABI_VERSION:
        raise ImportError(
            f"{path} implements polylb C ABI version {found}; this binding needs version "
            f"{ABI_VERSION}. Rebuild the library or reinstall the binding from the same checkout."
        )
    _declare(lib, path)
    return lib, path


lib, LIBRARY_PATH = _load()


def _undeclared(name: str, restype: Any) -> Any:
    """A second function object for `name` with its return type only, called holding the GIL.

    ctypes converts each argument declared in ``argtypes`` by calling its type's ``from_param``
    (70-150 ns per argument on CPython 3.11), but converts undeclared ints, bytes, None and
    ctypes instances inline. ``plb_select32`` and ``plb_report32`` take only pointers and 32-bit
    integers, which those inline conversions pass correctly, so the hot calls use these objects
    and check their argument types themselves. ``lib``'s declared objects stay as they are.

    Loaded as ``PyDLL``, not ``CDLL``: a select or report takes tens of nanoseconds and never
    waits on Python, and releasing the GIL around it cost more than it does (select + report
    about 470 -> 400 ns on one thread) and, with several threads, handed the GIL to another
    thread at every call (two threads: about 700 -> 400 ns per select + report, wall time).
    The one wait possible inside is for a lock that a concurrent ``update`` holds while it
    rebuilds a method's ``roundrobin`` period or lifts outlier ejections (it runs without the
    GIL, so it always finishes): other threads then wait that long too, about 0.2 ms at 1,000
    invokers.
    """
    function = getattr(ctypes.PyDLL(str(LIBRARY_PATH)), name)
    function.restype = restype
    return function


#: Undeclared ``plb_select32`` / ``plb_report32`` (see :func:`_undeclared`).
select32 = _undeclared("plb_select32", c_int64)
report32 = _undeclared("plb_report32", c_int32)


def status_text(status: int) -> str:
    """The library's static description of a status code (positive or negated)."""
    raw: Optional[bytes] = lib.plb_status_str(status)
    return raw.decode("utf-8", "replace") if raw is not None else f"status {status}"


def uint64_array(ids: Sequence[int]) -> "ctypes.Array[c_uint64]":
    """A C ``uint64_t[]`` holding ``ids`` (ctypes caches the array type per length)."""
    return (c_uint64 * len(ids))(*ids)
