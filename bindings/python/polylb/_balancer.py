"""The Pythonic face of libpolylb: :class:`Balancer`, :class:`Invoker` and :class:`Call`.

This module only marshals arguments, owns the native handle and turns status codes into
exceptions; every balancing decision is made by the library.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import operator
import os
import threading
import weakref
from ctypes import byref, c_size_t, c_uint32, c_void_p, create_string_buffer
from dataclasses import dataclass
from enum import Enum
from time import perf_counter_ns
from types import TracebackType
from typing import (
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from . import _ffi
from ._errors import (
    BalancerClosedError,
    ConfigError,
    InvalidArgumentError,
    InvalidUtf8Error,
    PolylbError,
    UnknownOutcomeError,
    error_for,
)
from ._ffi import Outcome, Status, invoker_array, uint64_array

#: A hash key: bytes are used as they are, text as its UTF-8 encoding.
Key = Union[bytes, str, bytearray, memoryview]
#: A method: an id from :meth:`Balancer.method` (fastest), or its name (interned on first use).
Method = Union[int, str]
#: Invoker ids: any sequence of ints, or a prebuilt array from :func:`id_array` (fastest).
Ids = Union[Sequence[int], "ctypes.Array[ctypes.c_uint64]", Iterable[int]]
ConfigValue = Union[str, bytes, int, float, bool]

# The hot calls, bound once: a module global is a cached lookup on CPython, cheaper than an
# attribute chain (_ffi.lib.plb_select) on every call.
_plb_select = _ffi.lib.plb_select
_plb_select_among = _ffi.lib.plb_select_among
_plb_report = _ffi.lib.plb_report
# The common calls (the whole set, the library's clock) go through the narrow entry points,
# called without argtypes (see _ffi._undeclared): the arguments' types are checked here instead.
_plb_select32 = _ffi.select32
_plb_report32 = _ffi.report32
# The outcome codes the library knows (an Outcome member hashes and compares as its int).
_OUTCOME_CODES = frozenset(int(o) for o in Outcome)

# Enum members bound once: on Python 3.11 each `Outcome.SUCCESS` lookup costs ~50-100 ns.
_SUCCESS, _FAILURE, _TIMEOUT, _CANCELLED = Outcome.SUCCESS, Outcome.FAILURE, Outcome.TIMEOUT, Outcome.CANCELLED
_new_call = object.__new__

_UINT64_END = 1 << 64
#: An id no invoker can have (above INT64_MAX).
_NO_INVOKER = _UINT64_END - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1

# Error messages longer than this are truncated by the library, never an error in themselves.
_MESSAGE_CAPACITY = 1024
_FIRST_STATS_CAPACITY = 4096


def id_array(ids: Iterable[int]) -> "ctypes.Array[ctypes.c_uint64]":
    """A C array of invoker ids for ``among=``/``exclude=``.

    Passing a list works too; building the array once and reusing it saves the conversion on
    every select when the same candidate set is used many times.
    """
    ids = ids if isinstance(ids, (list, tuple)) else tuple(ids)
    if ids and (min(ids) < 0 or max(ids) >= _UINT64_END):
        # c_uint64 would wrap such an int onto a valid-looking id (2**64 + 5 into 5). It names
        # no invoker, so it becomes one that cannot be a member (ids stop at 2**63 - 1): a
        # candidate that is not in the set, an exclusion that is ignored.
        ids = [i if 0 <= i < _UINT64_END else _NO_INVOKER for i in ids]
    return uint64_array(ids)


def _id_argument(ids: Iterable[int], name: str) -> "ctypes.Array[ctypes.c_uint64]":
    """id_array(ids) for the parameter ``name``, with a TypeError naming it."""
    if isinstance(ids, (str, bytes, bytearray, memoryview)):
        # Iterable, but not ids: bytes would pass as a list of small ints.
        raise TypeError(f"{name}: want a sequence of int ids, got {type(ids).__name__}")
    try:
        return id_array(ids)
    except TypeError as error:
        raise TypeError(f"{name}: invoker ids are ints ({error})") from None


@dataclass(frozen=True)
class Invoker:
    """One provider, as registered with :meth:`Balancer.update`.

    ``id`` is the caller's stable identity (unique in a set, 0 <= id <= 2**63 - 1) and is what
    :meth:`Balancer.select` returns. ``address`` (e.g. ``"10.0.0.1:20880"``) places the invoker on
    the consistent-hash ring (in maglev's table, in rendezvous' scores); the hashing strategies
    refuse an empty one.
    ``start_time_ms`` is the provider's start (Unix ms; 0 = unknown, no
    warm-up); ``warmup_ms`` < 0 means the balancer's default (Dubbo's 600000).
    """

    id: int
    address: Union[str, bytes]
    weight: int = 100
    start_time_ms: int = 0
    warmup_ms: int = -1
    zone: Optional[Union[str, bytes]] = None


def _utf8(text: Union[str, bytes], what: str) -> bytes:
    """Text as UTF-8; bytes pass unchanged so the library, not Python, judges their encoding."""
    if isinstance(text, bytes):
        return text
    if isinstance(text, str):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as error:  # lone surrogates cannot be UTF-8
            raise InvalidUtf8Error(Status.INVALID_UTF8, f"{what} is not valid UTF-8: {error}") from None
    raise TypeError(f"{what} must be str or bytes, not {type(text).__name__}")


def _utf8_text(data: bytes, what: str) -> str:
    """UTF-8 bytes as text, for a string the binding assembles (a config)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidUtf8Error(Status.INVALID_UTF8, f"value of {what!r} is not valid UTF-8: {error}") from None


def _key_bytes(key: Key) -> bytes:
    if isinstance(key, str):  # also str subclasses (numpy.str_, ...)
        return _utf8(key, "key")
    if isinstance(key, (bytes, bytearray, memoryview)):  # bytes subclasses too (numpy.bytes_, ...)
        return bytes(key)
    raise TypeError(f"key must be bytes or str, not {type(key).__name__}")


def _config_value(key: str, value: ConfigValue) -> str:
    # The base classes' own forms: a subclass may print otherwise (NumPy 2's float64 as
    # "np.float64(1.5)", an IntEnum member before Python 3.11 as "Name.MEMBER").
    if isinstance(value, bool):  # before int: bool is an int subclass
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = float.__repr__(value)
    elif isinstance(value, int):
        text = int.__repr__(value)
    elif isinstance(value, str):
        # A str subclass's own form (a `(str, Enum)` member prints as `Zone.US`).
        text = str.__str__(value)
    elif isinstance(value, (bytes, bytearray)):
        # Its text, not its repr (`b'us-east'`), as elsewhere in the binding (UTF-8).
        text = _utf8_text(bytes(value), key)
    else:
        text = str(value)
    if "&" in text:
        # The format has no escaping: an '&' would silently start a new key.
        raise ConfigError(Status.INVALID_CONFIG, f"value of {key!r} contains '&': {text!r}")
    return text


def _config_pair(key: str, value: ConfigValue) -> str:
    if not isinstance(key, str):
        raise TypeError(f"config keys must be str, not {type(key).__name__}: {key!r}")
    if not key or "&" in key or "=" in key:
        raise ConfigError(Status.INVALID_CONFIG, f"invalid config key {key!r}")
    return f"{key}={_config_value(key, value)}"


def build_config(
    loadbalance: Optional[str] = None,
    config: Union[str, bytes, Mapping[str, Optional[ConfigValue]], None] = None,
    params: Optional[Mapping[str, Optional[ConfigValue]]] = None,
) -> bytes:
    """The config string :class:`Balancer` passes to the library, from its arguments.

    Rule for keyword parameters: every ``_`` in the name becomes ``.`` (``hash_nodes=160`` is
    ``hash.nodes=160``), since Dubbo's keys use dots and no key uses an underscore. A key that
    cannot be spelled that way goes in ``config`` (a string, or a mapping whose keys are taken
    verbatim). ``None`` values are left out, meaning "the library's default". Booleans are written
    ``true``/``false``. Order: ``loadbalance``, then ``config``, then the keywords; a key given
    twice is the library's error (``ConfigError``), not silently overridden. A ``loadbalance``
    with an ``=`` is a whole config string, as the other bindings' constructors take one
    (``Balancer("loadbalance=p2c&seed=7")``): no strategy name has one.
    """
    parts: List[bytes] = []
    if isinstance(loadbalance, str) and "=" in loadbalance:
        parts.append(_library_text(loadbalance, "config"))
    elif loadbalance is not None:
        parts.append(_library_text(_config_pair("loadbalance", loadbalance), "config"))
    if isinstance(config, (str, bytes)):
        if config:
            parts.append(_library_text(config, "config"))
    elif config is not None:
        if not isinstance(config, Mapping):
            raise TypeError(
                f"config must be a str, bytes or a mapping of keys to values, not {type(config).__name__}"
            )
        for key, value in config.items():
            if value is not None:
                parts.append(_library_text(_config_pair(key, value), "config"))
    for name, param in (params or {}).items():
        if param is not None:
            parts.append(_library_text(_config_pair(name.replace("_", "."), param), "config"))
    return b"&".join(parts)


def _check_range(value: int, low: int, high: int, what: str) -> None:
    # ctypes silently wraps integers that overflow a C field; refuse them instead.
    if not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(
            Status.INVALID_ARGUMENT, f"{what} {value} does not fit its C type ({low}..{high})"
        )


def _library_text(text: Union[str, bytes], what: str) -> bytes:
    """Text for the library to judge (a config, an address, a zone). A str with a lone surrogate
    (no UTF-8 form) is passed in its surrogate-escaped form, which is not UTF-8: the library then
    rejects it at its own place in its checks (for an update: every address and zone first, in
    order), as it does invalid bytes, with the message it gives C, Go and Java for that text."""
    if isinstance(text, str):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return text.encode("utf-8", "surrogatepass")
    return _utf8(text, what)


_InvokerRow = Tuple[int, bytes, int, int, int, Optional[bytes]]


def _to_row(invoker: Invoker) -> _InvokerRow:
    """The fields of an invoker as the C struct takes them: at once for plain ints in range and
    text that encodes (what nearly every set holds), else by :func:`_to_row_checked`, which says
    what is wrong."""
    if invoker.__class__ is Invoker:
        id, weight = invoker.id, invoker.weight
        start_time_ms, warmup_ms = invoker.start_time_ms, invoker.warmup_ms
        address, zone = invoker.address, invoker.zone
        if (
            id.__class__ is int
            and weight.__class__ is int
            and start_time_ms.__class__ is int
            and warmup_ms.__class__ is int
            and address.__class__ is str
            and (zone is None or zone.__class__ is str)
            and 0 <= id < _UINT64_END
            and _INT32_MIN <= weight <= _INT32_MAX
            and _INT64_MIN <= start_time_ms <= _INT64_MAX
            and _INT32_MIN <= warmup_ms <= _INT32_MAX
        ):
            try:
                raw_address = address.encode("utf-8")
                raw_zone = None if zone is None else zone.encode("utf-8")
            except UnicodeEncodeError:
                pass  # a lone surrogate: the checked path passes its escaped form on
            else:
                return (id, raw_address, weight, start_time_ms, warmup_ms, raw_zone)
    return _to_row_checked(invoker)


def _to_row_checked(invoker: Invoker) -> _InvokerRow:
    """The fields of an invoker for the C struct. Wrong types and values that exist in no other
    language (beyond the C field's type) are refused here; every other bad value goes to the
    library, which checks the list in its order. An id outside 0 .. 2**64 - 1 or a weight below
    -2**31 is given in a form the library rejects the same way (an id above INT64_MAX, a
    negative weight), so such an invoker is reported where the library reports ids and weights
    (see _update_error)."""
    if not isinstance(invoker, Invoker):
        raise TypeError(f"update() takes Invoker objects, not {type(invoker).__name__}")
    # Ints as every int argument takes them: an IntEnum member, any object with __index__
    # (NumPy's integers).
    id = _index(invoker.id)
    if not isinstance(id, int):
        raise TypeError(f"invoker id must be an int, not {type(invoker.id).__name__}")
    # Packed into a C field, these would be refused without saying which invoker had them.
    id = int(id) if 0 <= id < _UINT64_END else _UINT64_END - 1
    weight = _index(invoker.weight)
    if isinstance(weight, int) and weight < _INT32_MIN:
        weight = _INT32_MIN
    start_time_ms, warmup_ms = _index(invoker.start_time_ms), _index(invoker.warmup_ms)
    _check_range(weight, _INT32_MIN, _INT32_MAX, f"invoker {invoker.id}: weight")
    _check_range(start_time_ms, _INT64_MIN, _INT64_MAX, f"invoker {invoker.id}: start_time_ms")
    _check_range(warmup_ms, _INT32_MIN, _INT32_MAX, f"invoker {invoker.id}: warmup_ms")
    address = _library_text(invoker.address, f"invoker {invoker.id}: address")
    zone = None if invoker.zone is None else _library_text(invoker.zone, f"invoker {invoker.id}: zone")
    return (id, address, int(weight), int(start_time_ms), int(warmup_ms), zone)


def _update_error(status: int, message: str, invokers: List[Invoker]) -> PolylbError:
    """The error of a rejected update; for an id or weight _to_row_checked had to stand in for, the
    message names the value as the caller wrote it. The library stops at the first bad invoker
    and checks its id, then its weight, so that invoker is the first with a bad id (weight)."""
    if status == Status.ID_OUT_OF_RANGE:
        for i, invoker in enumerate(invokers):
            id = _index(invoker.id)
            if not 0 <= id <= _INT64_MAX:
                if not 0 <= id < _UINT64_END:
                    message = f"invoker #{i}: id {id} is outside 0..{_INT64_MAX}"
                break
    elif status == Status.NEGATIVE_WEIGHT:
        for i, invoker in enumerate(invokers):
            weight = _index(invoker.weight)
            if weight < 0:
                if weight < _INT32_MIN:
                    message = f"invoker #{i} (id {_index(invoker.id)}): weight {weight} is negative"
                break
    return error_for(status, message)


def _index(value: Any) -> Any:
    """``value`` as the int ctypes would pass for it (an int subclass such as an IntEnum
    member, or any object with ``__index__``, as NumPy's integers have), else as given: ctypes
    then raises its own TypeError, which the caller names the parameter in."""
    if value.__class__ is int:
        return value
    try:
        return operator.index(value)
    except TypeError:
        return value


def _check_doubles(**numbers: Any) -> None:
    """Raises :class:`InvalidArgumentError` for an int too large for a double among arguments
    declared ``double``: ctypes would fail to convert it with a bare "wrong type", although an
    int is an accepted type there (and a double that large is not finite)."""
    for name, value in numbers.items():
        if isinstance(value, int):
            try:
                float(value)
            except OverflowError:
                raise error_for(
                    Status.INVALID_ARGUMENT,
                    f"invalid argument: {name} = {value!r} (want finite and >= 0)",
                ) from None


def _range_status(method: Any, *times: Any) -> int:
    """The status for a method id, or a clock or time (``int64_t``), outside its C type, else 0.

    The declared c_uint32 / c_int64 arguments would wrap such an int (2**32 + m into m) onto a
    valid-looking value; no method has an id outside 32 bits, and no time outside 64 bits
    exists in the other languages. Whatever ctypes takes as an int is checked as one.
    """
    method = _index(method)
    if isinstance(method, int) and not 0 <= method <= 0xFFFF_FFFF:
        return int(Status.UNKNOWN_METHOD)
    for value in times:
        value = _index(value)
        if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
            return int(Status.INVALID_ARGUMENT)
    return 0


def _type_error(error: ctypes.ArgumentError, parameters: Tuple[str, ...]) -> TypeError:
    """ctypes' "argument 4: TypeError: wrong type" as a TypeError naming the parameter."""
    text = str(error)
    head, _, detail = text.partition(": ")
    try:
        name = parameters[int(head.split()[-1]) - 1]
    except (ValueError, IndexError):
        return TypeError(text)
    # "TypeError: wrong type" from Python 3.11 on, "<class 'TypeError'>: wrong type" before.
    for prefix in ("TypeError: ", "<class 'TypeError'>: "):
        if detail.startswith(prefix):
            detail = detail[len(prefix):]
    return TypeError(f"{name}: {detail}")


# C parameter names of the hot calls, for _type_error.
_SELECT_PARAMS = ("balancer", "method", "key", "key_len", "now_us")
_SELECT_AMONG_PARAMS = (
    "balancer", "method", "key", "key_len", "among", "n_among", "exclude", "n_exclude", "now_us",
)
_REPORT_PARAMS = ("balancer", "method", "id", "elapsed_us", "outcome", "now_us")
_STATS_PARAMS = ("balancer", "now_us", "buf", "cap", "len")
_METRICS_PARAMS = ("balancer", "method", "id", "provider_time_ms", "cpu_load", "rt_us", "now_us")
_LOAD_PARAMS = ("balancer", "id", "qps", "eps", "utilization", "now_us")


def _message(buffer: "ctypes.Array[ctypes.c_char]", length: c_size_t) -> str:
    # *len is what was written without the NUL; min() also keeps a library that reported the
    # untruncated length from making us read past what it wrote.
    used = min(length.value, len(buffer) - 1)
    return buffer.raw[:used].decode("utf-8", "replace")


# What a gRPC status says about the provider (docs/outcomes.md), by grpc.StatusCode member name.
# An error of the service's own is a provider that answered: a success. OK, and any name not
# here, is not read: the exception's type decides, as for any other exception.
_GRPC_OUTCOMES: Dict[str, Outcome] = {
    "INVALID_ARGUMENT": _SUCCESS,
    "NOT_FOUND": _SUCCESS,
    "ALREADY_EXISTS": _SUCCESS,
    "PERMISSION_DENIED": _SUCCESS,
    "UNAUTHENTICATED": _SUCCESS,
    "FAILED_PRECONDITION": _SUCCESS,
    "ABORTED": _SUCCESS,
    "OUT_OF_RANGE": _SUCCESS,
    "UNAVAILABLE": _FAILURE,
    "RESOURCE_EXHAUSTED": _FAILURE,
    "UNIMPLEMENTED": _FAILURE,
    "INTERNAL": _FAILURE,
    "UNKNOWN": _FAILURE,
    "DATA_LOSS": _FAILURE,
    "DEADLINE_EXCEEDED": _TIMEOUT,
    "CANCELLED": _CANCELLED,
}


# grpc.Future's errors, by class name: ``result()`` of a future cancelled by this side, and of
# one that did not finish within the wait's timeout.
_GRPC_FUTURE_OUTCOMES: Dict[str, Outcome] = {
    "FutureCancelledError": _CANCELLED,
    "FutureTimeoutError": _TIMEOUT,
}


def _grpc_outcome(exc: BaseException) -> Optional[Outcome]:
    """The outcome of an error raised by grpcio, from its status; None for any other exception.

    grpc is never imported (the binding depends on nothing): an error is grpcio's when a class in
    its MRO comes from the ``grpc`` package (``grpc.RpcError``; sync stubs raise
    ``grpc._channel._InactiveRpcError``, asyncio stubs ``grpc.aio.AioRpcError``), and its status
    is what its ``code()`` returns, a ``grpc.StatusCode`` member, read by name. Whatever cannot be
    read this way, or raises while being read, gives None.
    """
    try:
        for cls in type(exc).__mro__:
            module = cls.__module__
            if module == "grpc" or module.startswith("grpc."):
                break
        else:
            return None
        # The sync future API's own errors carry no status: a future this side cancelled, and a
        # wait for its result that ran out.
        future_outcome = _GRPC_FUTURE_OUTCOMES.get(cls.__name__)
        if future_outcome is not None:
            return future_outcome
        code = getattr(exc, "code", None)
        if not callable(code):
            return None
        status = code()
        outcome = _status_outcome(status)
        if _is_resource_exhausted(outcome, status):
            limited = _size_limit_outcome(exc)
            return outcome if limited is None else limited
        return outcome
    except Exception:  # a broken code() must not replace the block's own exception
        return None


# gRPC's size check's words (gRPC C-core's, which grpcio uses, grpc-go's and grpc-java's, as a
# provider written with them sends them back), lower-cased.
_RECEIVE_LIMIT_WORDS = (
    "received message larger than max",
    "received message after decompression larger than max",
    "decompressed message larger than max",
    "grpc message exceeds maximum size",
)


def _size_limit_outcome(exc: BaseException) -> Optional[Outcome]:
    """A RESOURCE_EXHAUSTED that gRPC's size check raised, by its details: a message over a
    receiver's limit (this side's, or the provider's refusing the request) is a success, as
    another provider would do the same; a request over this side's send limit was never sent, a
    cancel. None for any other RESOURCE_EXHAUSTED (a server shedding load: a failure)."""
    details = getattr(exc, "details", None)
    if not callable(details):
        return None
    text = details()
    if inspect.isawaitable(text):  # not an error's details: nothing to read without awaiting
        close = getattr(text, "close", None)
        if callable(close):
            close()
        return None
    return _size_limit_of(text)


def _size_limit_of(details: Any) -> Optional[Outcome]:
    """What gRPC's size check's ``details`` say (see _size_limit_outcome); None for other text."""
    if not isinstance(details, str):
        return None
    words = details.lower()
    if any(limit in words for limit in _RECEIVE_LIMIT_WORDS):
        return _SUCCESS
    if "sent message larger than max" in words:
        return _CANCELLED
    return None


def _is_resource_exhausted(outcome: Optional[Outcome], status: Any) -> bool:
    return outcome is _FAILURE and getattr(status, "name", None) == "RESOURCE_EXHAUSTED"


def _status_outcome(status: Any, ok: Optional[Outcome] = None) -> Optional[Outcome]:
    """The outcome of a ``grpc.StatusCode`` (read by name): ``ok`` for OK, None for a value
    that is no status or a name not in the table."""
    if not isinstance(status, Enum):
        return None
    name = status.name
    if name == "OK":
        return ok
    return _GRPC_OUTCOMES.get(name) if isinstance(name, str) else None


def _outcome_of(exc_type: Optional[Type[BaseException]], exc: Optional[BaseException] = None) -> Outcome:
    if exc_type is None:
        return _SUCCESS
    if exc is not None:
        grpc_outcome = _grpc_outcome(exc)
        if grpc_outcome is not None:
            return grpc_outcome
    if issubclass(exc_type, TimeoutError):  # also socket.timeout and, since 3.11, asyncio's
        return _TIMEOUT
    if issubclass(exc_type, Exception):
        return _FAILURE
    # KeyboardInterrupt, SystemExit, asyncio.CancelledError...: the call was abandoned by this
    # side, which says nothing about the provider, so only the in-flight count is undone.
    return _CANCELLED


#: Every live Balancer, for _after_fork_in_child.
_live_balancers: "weakref.WeakSet[Balancer]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A thread that held a balancer's update lock at the fork does not exist in the child: the
    # lock would stay held for ever, and the child's update() and close() hang. What it guarded
    # is consistent: the library makes a fork wait for the native update in flight.
    for balancer in list(_live_balancers):
        balancer._update_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Balancer:
    """A load balancer over a set of invokers, backed by one libpolylb handle.

    ``Balancer(loadbalance="leastactive", hash_nodes=160)`` or
    ``Balancer(config="loadbalance=consistenthash&hash.nodes=160")``; see :func:`build_config`
    for how keyword parameters become config keys. Thread-safe: any number of threads may select,
    report and update at once. :meth:`close` (or leaving a ``with`` block) drops the invoker set
    and its state at once, and later calls raise :class:`BalancerClosedError`; the native
    balancer itself (a few KB) is freed by ``weakref.finalize`` when the object is garbage-
    collected. So close may race calls in other threads: each completes or raises
    :class:`BalancerClosedError`, and none can reach freed memory.
    """

    __slots__ = (
        "_handle",
        "_hot_handle",
        "_finalizer",
        "_methods",
        "_config",
        "_stats_capacity",
        "_update_lock",
        "__weakref__",
    )

    _handle: Optional[int]
    #: The handle as an undeclared argument of the hot calls; None once closed (NULL).
    _hot_handle: Any

    def __init__(
        self,
        loadbalance: Optional[str] = None,
        *,
        config: Union[str, bytes, Mapping[str, Optional[ConfigValue]], None] = None,
        **params: Optional[ConfigValue],
    ) -> None:
        # Set first so that __repr__/close work even when creation fails below.
        self._handle = None
        self._hot_handle = None
        self._update_lock = threading.Lock()
        self._methods: Dict[str, int] = {"": 0}
        self._stats_capacity = _FIRST_STATS_CAPACITY
        raw = build_config(loadbalance, config, params)
        self._config = raw.decode("utf-8", "replace")
        out = c_void_p()
        message = create_string_buffer(_MESSAGE_CAPACITY)
        message_len = c_size_t()
        status = _ffi.lib.plb_balancer_new(
            raw, len(raw), byref(out), message, _MESSAGE_CAPACITY, byref(message_len)
        )
        if status:
            raise error_for(status, _message(message, message_len))
        if not out.value:
            raise PolylbError(Status.NULL_POINTER, "plb_balancer_new returned no handle")
        self._handle = out.value
        # byref() of an object placed at the handle's address is a ready-made pointer
        # argument that ctypes copies as it is (a c_void_p would be converted on every call,
        # about 50 ns); the native balancer lives as long as this object.
        self._hot_handle = byref(ctypes.c_char.from_address(out.value))
        # Holds only the address, not self, so it cannot keep the balancer alive; it runs once,
        # when the balancer is garbage-collected, and then no call can be running: each holds a
        # reference to self. Not at interpreter exit: daemon threads still run then and may be
        # inside the library, and the OS reclaims the memory.
        self._finalizer = weakref.finalize(self, _ffi.lib.plb_balancer_free, out.value)
        self._finalizer.atexit = False
        _live_balancers.add(self)

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Drop the invoker set and its state. Idempotent; safe while other threads call.

        Later calls raise :class:`BalancerClosedError`. The native balancer is freed when this
        object is garbage-collected, never under a call that another thread is still making.
        """
        with self._update_lock:
            handle = self._handle
            if handle is None:
                return
            # Later calls pass NULL (a clean error); a call already past that point sees the
            # empty set (NO_PROVIDER, reported as closed by _hot_error), never freed memory.
            self._handle = None
            self._hot_handle = None
            message = create_string_buffer(_MESSAGE_CAPACITY)
            message_len = c_size_t()
            _ffi.lib.plb_balancer_update(
                handle, None, 0, message, _MESSAGE_CAPACITY, byref(message_len)
            )

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _not_copyable(self, *args: Any) -> Any:
        # The default copy would share the native handle without a finalizer of its own, and
        # the original's finalizer would free it under the copy.
        raise TypeError(
            "a polylb.Balancer owns a native balancer and cannot be copied or pickled; "
            "create another Balancer with the same config (Balancer(config=lb.config))"
        )

    __copy__ = __deepcopy__ = __reduce_ex__ = __reduce__ = _not_copyable

    def __enter__(self) -> "Balancer":
        self._open_handle()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else "open"
        return f"<polylb.Balancer {self._config!r} {state}>"

    @property
    def config(self) -> str:
        """The config string given to the library."""
        return self._config

    def _open_handle(self) -> int:
        handle = self._handle
        if handle is None:
            raise BalancerClosedError()
        return handle

    def _hot_error(self, status: int, **arguments: Any) -> PolylbError:
        # A closed balancer passes a NULL handle, which the library answers with NULL_POINTER;
        # this keeps the "is it closed?" check off the hot path.
        if self._handle is None:
            return BalancerClosedError()
        if status == Status.INVALID_ARGUMENT:
            # The hot calls return a bare code; the arguments say which one it was about.
            for name, value in arguments.items():
                if isinstance(value, float):  # cpu_load: any finite value >= 0
                    bad = not value >= 0 or value == float("inf")  # NaN too
                else:
                    value = _index(value)  # NumPy's integers are named as ints are
                    low = _INT64_MIN if name == "now_us" else 0
                    bad = isinstance(value, int) and not low <= value <= _INT64_MAX
                if bad:
                    want = "an int64 clock" if name == "now_us" else "finite and >= 0"
                    return error_for(status, f"invalid argument: {name} = {value!r} (want {want})")
        return error_for(status)

    # -- cold calls -------------------------------------------------------------------------

    def update(self, invokers: Iterable[Invoker]) -> None:
        """Replace the whole invoker set atomically (an empty set is allowed).

        State of ids that stay (active counts, latency windows, round-robin weights) is kept.
        """
        try:
            invokers = list(invokers)
        except TypeError:
            raise TypeError(
                f"update() takes an iterable of Invoker objects, not {type(invokers).__name__}"
            ) from None
        array, text = invoker_array([_to_row(invoker) for invoker in invokers])
        message = create_string_buffer(_MESSAGE_CAPACITY)
        message_len = c_size_t()
        # Under the lock close() takes, so that no update can reinstall a set after close.
        with self._update_lock:
            status = _ffi.lib.plb_balancer_update(
                self._open_handle(), array, len(array), message, _MESSAGE_CAPACITY, byref(message_len)
            )
        del text  # what the array points into; the library has copied what it keeps
        if status:
            raise _update_error(status, _message(message, message_len), invokers)

    def method(self, name: Union[str, bytes]) -> int:
        """The id of a method name, for the ``method=`` argument of select and report.

        The same name always gives the same id; ``""`` is 0, the service level. Names are cached
        here, so passing ``method="sayHello"`` to select is fine, if a little slower than the id.
        """
        handle = self._open_handle()
        if isinstance(name, str):
            cached = self._methods.get(name)
            if cached is not None:
                return cached
        raw = _utf8(name, "method name")
        out = c_uint32()
        status = _ffi.lib.plb_balancer_method(handle, raw, len(raw), byref(out))
        if status:
            raise error_for(status)
        if isinstance(name, str):
            self._methods[name] = out.value
        return out.value

    def _method_id(self, method: Method) -> int:
        if isinstance(method, (str, bytes)):
            return self.method(method)
        # An int subclass (an IntEnum member) or any object with __index__ (NumPy's integers),
        # as every other int argument takes them; its range is checked where ints are.
        index = _index(method)
        if isinstance(index, int):
            return int(index)
        raise TypeError(f"method must be an id (int) or a name (str), not {type(method).__name__}")

    def stats(self, now_us: int = 0) -> Dict[str, Any]:
        """A snapshot of the balancer's state, parsed from the library's JSON.

        ``{"strategy": ..., "invokers": [{"id", "address", "weight", "effective_weight",
        "active", "selected", "failures", ...strategy-specific fields}]}``; effective weights are
        evaluated at ``now_us`` (Unix microseconds; 0 = now).
        """
        handle = self._open_handle()
        if _range_status(0, now_us):
            raise self._hot_error(Status.INVALID_ARGUMENT, now_us=now_us)
        capacity = self._stats_capacity
        length = c_size_t()
        while True:
            buffer = create_string_buffer(capacity)
            try:
                status = _ffi.lib.plb_balancer_stats(handle, now_us, buffer, capacity, byref(length))
            except ctypes.ArgumentError as error:
                raise _type_error(error, _STATS_PARAMS) from None
            if status == Status.BUFFER_TOO_SMALL and length.value >= capacity:
                # *len is the size needed without the NUL; the set may still grow before the
                # retry (a concurrent update), hence the loop.
                capacity = length.value + 1
                continue
            if status:
                raise error_for(status)
            break
        # The next guess follows this size down as well as up: kept at its peak, one stats of
        # a large set made every later one allocate (and zero) that much for a small set.
        self._stats_capacity = max(_FIRST_STATS_CAPACITY, length.value + 1 + length.value // 4)
        # string_at copies the JSON only; buffer.raw would copy the whole buffer first.
        result: Dict[str, Any] = json.loads(ctypes.string_at(buffer, length.value))
        return result

    # -- hot calls --------------------------------------------------------------------------

    def select(
        self,
        key: Optional[Key] = None,
        method: Method = 0,
        among: Optional[Ids] = None,
        exclude: Optional[Ids] = None,
        now_us: int = 0,
    ) -> int:
        """Pick an invoker and count the call as in flight; returns its id.

        ``key`` is the hash key of ``consistenthash``, ``boundedhash``, ``maglev`` and
        ``rendezvous`` (str is hashed as UTF-8). ``among`` restricts the pick to those ids
        (``None`` or empty: all, as in the C ABI); ``exclude`` removes ids already tried by a
        failover (ids not in the set are ignored; if nothing is left, :class:`NoCandidateError`). Every select must be followed by one
        :meth:`report` for the returned id (or use :meth:`call`).
        """
        if key is None:
            key_len = 0
        else:
            if key.__class__ is not bytes:
                key = _key_bytes(key)
            key_len = len(key)
        if method.__class__ is not int:
            method = self._method_id(method)
        if among is None and exclude is None:
            picked: int
            # Undeclared, an int is cut to its low 32 bits, as the declared c_uint32 method
            # is; a key length cannot be, so a longer key takes the declared call, as do
            # explicit clocks.
            # `not x >> 32` is the cheapest test of 0 <= x < 2**32 (a negative x shifts to -1);
            # for two non-negative ints, `not (x | y) >> 32` tests both with one shift less.
            if now_us == 0 and not (key_len | method) >> 32:
                picked = _plb_select32(self._hot_handle, method, key, key_len)
            else:
                picked = self._select_wide(method, key, key_len, now_us)
        else:
            picked = self._select_among(method, key, key_len, among, exclude, now_us)
        if picked < 0:
            raise self._hot_error(-picked, now_us=now_us)
        return picked

    def _select_wide(self, method: int, key: Optional[bytes], key_len: int, now_us: int) -> int:
        status = _range_status(method, now_us)
        if status:
            return -status
        try:
            picked: int = _plb_select(self._handle, method, key, key_len, now_us)
        except ctypes.ArgumentError as error:
            raise _type_error(error, _SELECT_PARAMS) from None
        return picked

    def _select_among(
        self,
        method: int,
        key: Optional[bytes],
        key_len: int,
        among: Optional[Ids],
        exclude: Optional[Ids],
        now_us: int,
    ) -> int:
        status = _range_status(method, now_us)
        if status:
            return -status
        if among is not None and not isinstance(among, ctypes.Array):
            among = _id_argument(among, "among")
        if exclude is not None and not isinstance(exclude, ctypes.Array):
            exclude = _id_argument(exclude, "exclude")
        try:
            picked: int = _plb_select_among(
                self._handle,
                method,
                key,
                key_len,
                among,
                0 if among is None else len(among),
                exclude,
                0 if exclude is None else len(exclude),
                now_us,
            )
        except ctypes.ArgumentError as error:
            raise _type_error(error, _SELECT_AMONG_PARAMS) from None
        return picked

    def report(
        self,
        id: int,
        elapsed_us: int,
        outcome: Union[Outcome, int],
        method: Method = 0,
        now_us: int = 0,
    ) -> None:
        """End a call started by :meth:`select`: its latency in microseconds and how it ended.

        A report for an id that has since left the set is accepted and ignored.
        """
        if method.__class__ is not int:
            method = self._method_id(method)
        status: int
        # Undeclared, ctypes checks no type (a float would pass as a double) and cuts an int to
        # its low 32 bits. So the narrow call is made only for what it carries exactly: an int
        # elapsed time in 0 .. 2**32 - 1, an outcome code 0..3 (int or Outcome), an int id in
        # 0 .. 2**64 - 1 and a method id in 0 .. 2**32 - 1. `not x >> k` checks 0 <= x < 2**k
        # in one shift (a negative x shifts to -1; cheaper than comparing with a two-digit int)
        # and raises TypeError for a float. Everything else (explicit clocks, negative or long
        # times, out-of-range ints, wrong types) takes the declared call, which range-checks
        # what ctypes would wrap.
        try:
            if now_us == 0 and not (elapsed_us | method | id) >> 32 and not outcome >> 2:
                # The common case, all three below 2**32 (a negative one makes the `|`
                # negative): the id is its own low half. `id & 0xFFFF_FFFF` would allocate an
                # int even for a small id (the constant has two 30-bit digits; CPython returns
                # the cached small int and frees the new one).
                status = _plb_report32(self._hot_handle, method, 0, id, elapsed_us, outcome)
            elif (
                now_us == 0
                and not elapsed_us >> 32
                and not outcome >> 2
                and not ((high := id >> 32) >> 32 | method >> 32)
            ):
                status = _plb_report32(self._hot_handle, method, high, id & 0xFFFF_FFFF, elapsed_us, outcome)
            else:
                status = self._report_wide(method, id, elapsed_us, outcome, now_us)
        except (TypeError, ctypes.ArgumentError):
            status = self._report_wide(method, id, elapsed_us, outcome, now_us)
        if status:
            raise self._hot_error(status, elapsed_us=elapsed_us, now_us=now_us)

    def _report_wide(self, method: int, id: int, elapsed_us: int, outcome: Union[Outcome, int], now_us: int) -> int:
        code = _index(outcome)
        if isinstance(code, int) and code not in _OUTCOME_CODES:
            # No outcome has this code: let the library reject it (a c_int32 argument would
            # silently keep only the low 32 bits of a larger int).
            outcome = -1
        # The library checks the outcome first; so does this (an unknown one is -1 by now).
        range_status = _range_status(method, now_us, elapsed_us) if outcome != -1 else 0
        if range_status:
            return range_status
        id = _index(id)
        if isinstance(id, int) and not 0 <= id < _UINT64_END:
            # Likewise an id outside 64 bits names no invoker; do not let it wrap onto one, and
            # let the library check the rest (method, elapsed time, a closed handle) as it does
            # for any id that is not in the set.
            id = _NO_INVOKER
        try:
            status: int = _plb_report(self._handle, method, id, elapsed_us, outcome, now_us)
        except ctypes.ArgumentError as error:
            raise _type_error(error, _REPORT_PARAMS) from None
        return status

    def report_provider_metrics(
        self,
        id: int,
        provider_time_ms: int,
        cpu_load: float,
        rt_us: int,
        method: Method = 0,
        now_us: int = 0,
    ) -> None:
        """For ``adaptive``: what a Dubbo provider sends back in its ``lb_adaptive`` attachment.

        ``provider_time_ms`` is the provider's clock, ``cpu_load`` its load (>= 0, not NaN) and
        ``rt_us`` its own measured response time.
        """
        if method.__class__ is not int:
            method = self._method_id(method)
        # As in _report_wide: what ctypes would wrap onto a valid value is refused, and an id
        # outside 64 bits names no invoker (the library still checks the other arguments).
        named = {"provider_time_ms": provider_time_ms, "cpu_load": cpu_load, "rt_us": rt_us, "now_us": now_us}
        status = _range_status(method, provider_time_ms, rt_us, now_us)
        if status:
            raise self._hot_error(status, **named)
        _check_doubles(cpu_load=cpu_load)
        id = _index(id)
        if isinstance(id, int) and not 0 <= id < _UINT64_END:
            id = _NO_INVOKER
        try:
            status = _ffi.lib.plb_report_provider_metrics(
                self._handle, method, id, provider_time_ms, cpu_load, rt_us, now_us
            )
        except ctypes.ArgumentError as error:
            raise _type_error(error, _METRICS_PARAMS) from None
        if status:
            raise self._hot_error(status, **named)

    def report_load(
        self,
        id: int,
        qps: float,
        eps: float,
        utilization: float,
        now_us: int = 0,
    ) -> None:
        """For ``orca``: a provider's load report (ORCA's numbers, from a call's trailers or out
        of band) for invoker ``id``.

        ``qps`` is the queries per second the provider served, ``eps`` how many of them failed
        (at most ``qps``) and ``utilization`` how busy it is (CPU or the application's own
        measure, 1.0 = full); each finite and >= 0, else :class:`InvalidArgumentError`, and
        nothing changes. The invoker's weight becomes ``qps / (utilization + eps / qps ×
        orca.errorPenalty)`` once ``orca.blackoutMs`` has passed since its first report; a report
        with ``qps`` or ``utilization`` 0 is ignored. Reports are kept per invoker, not per
        method. An id not in the set, and other strategies, accept and ignore it (it is checked
        all the same).
        """
        named = {"qps": qps, "eps": eps, "utilization": utilization, "now_us": now_us}
        if _range_status(0, now_us):
            raise self._load_error(Status.INVALID_ARGUMENT, named)
        _check_doubles(qps=qps, eps=eps, utilization=utilization)
        id = _index(id)
        if isinstance(id, int) and not 0 <= id < _UINT64_END:
            # As in _report_wide: an id outside 64 bits names no invoker (ctypes would wrap it
            # onto one); the library still checks the numbers and the handle.
            id = _NO_INVOKER
        try:
            status: int = _ffi.lib.plb_report_load(self._handle, id, qps, eps, utilization, now_us)
        except ctypes.ArgumentError as error:
            raise _type_error(error, _LOAD_PARAMS) from None
        if status:
            raise self._load_error(status, named)

    def _load_error(self, status: int, named: Dict[str, Any]) -> PolylbError:
        """The error of a refused load report, naming the number it is about (the library
        returns a bare code)."""
        if self._handle is None or status != Status.INVALID_ARGUMENT:
            return self._hot_error(status)
        numbers: Dict[str, float] = {}
        for name in ("qps", "eps", "utilization"):
            try:
                value = float(named[name])
            except (TypeError, ValueError, OverflowError):
                return self._hot_error(status)
            if not 0 <= value < float("inf"):  # NaN too
                return error_for(status, f"invalid argument: {name} = {named[name]!r} (want finite and >= 0)")
            numbers[name] = value
        if numbers["eps"] > numbers["qps"]:
            return error_for(
                status,
                f"invalid argument: eps = {named['eps']!r} is above qps = {named['qps']!r} "
                "(want eps <= qps)",
            )
        return self._hot_error(status, now_us=named["now_us"])

    def call(
        self,
        key: Optional[Key] = None,
        method: Method = 0,
        among: Optional[Ids] = None,
        exclude: Optional[Ids] = None,
    ) -> "Call":
        """A context manager around one RPC: selects on entry, reports on exit.

        ::

            with balancer.call(key=user_id, method="sayHello") as call:
                send(addresses[call.id])

        The elapsed time is measured with ``time.perf_counter_ns``. The outcome is success when
        the block ends normally. An error raised by grpcio (``grpc.RpcError``, sync or
        ``grpc.aio``; recognised without importing grpc) is judged by its status, as a verdict on
        the provider (docs/outcomes.md): an error of the service's own (``INVALID_ARGUMENT``,
        ``NOT_FOUND``, ``ALREADY_EXISTS``, ``PERMISSION_DENIED``, ``UNAUTHENTICATED``,
        ``FAILED_PRECONDITION``, ``ABORTED``, ``OUT_OF_RANGE``) is success,
        ``DEADLINE_EXCEEDED`` timeout, ``CANCELLED`` cancelled, and ``UNAVAILABLE``,
        ``RESOURCE_EXHAUSTED``, ``UNIMPLEMENTED``, ``INTERNAL``, ``UNKNOWN``, ``DATA_LOSS``
        failure; a sync future's ``grpc.FutureCancelledError`` (after this side's ``cancel()``)
        is cancelled and ``grpc.FutureTimeoutError`` (its wait ran out) timeout. Any other
        exception (or a gRPC error whose status cannot be read): timeout on
        ``TimeoutError``, failure on any other ``Exception`` and cancelled on ``BaseException``s
        that are not ``Exception``s (``KeyboardInterrupt``, ``asyncio.CancelledError``). Set
        ``call.outcome`` inside the block to decide it yourself; it wins over all of these.
        A ``call.outcome`` that is no outcome still ends the call, as cancelled (the in-flight
        count is undone, nothing is recorded), and raises ``TypeError`` (``UnknownOutcomeError``
        for an int outside 0..3) only from a block that ended normally.
        Exceptions are never swallowed, nor replaced: if the balancer is closed (by another
        thread) during the block, the block's own exception propagates; a block that ended
        normally then raises :class:`BalancerClosedError`. Works with ``async with`` too.
        For a stream, open and consume it in the block and pass it to :meth:`Call.stream`.
        """
        if method.__class__ is not int:
            method = self._method_id(method)
        # Made without Call's constructor: a class call through __init__ costs about as many
        # instructions as the select itself.
        call = _new_call(Call)
        call._balancer = self
        call._key = key
        call._method = method
        call._among = among
        call._exclude = exclude
        call._stream = None
        call._id = -1
        call._phase = _FRESH
        call.outcome = None
        return call


# A Call's life: made, then in its `with` block (selected, not yet reported), then ended. It is
# one RPC: entering it again, nested or concurrently (one object shared by two coroutines) or
# after it ended, would select a second invoker with one report left to end both.
_FRESH, _OPEN, _ENDED = 0, 1, 2


_Stream = TypeVar("_Stream")


class Call:
    """One RPC in flight; see :meth:`Balancer.call`. ``id`` is the selected invoker."""

    __slots__ = (
        "_balancer",
        "_key",
        "_method",
        "_among",
        "_exclude",
        "_started_ns",
        "_stream",
        "_id",
        "_phase",
        "outcome",
    )

    # Declared for type checkers; Balancer.call sets them (`_started_ns`: __enter__).
    _balancer: Balancer
    _key: Optional[Key]
    _method: int
    _among: Optional[Ids]
    _exclude: Optional[Ids]
    _started_ns: int
    _stream: Any
    _id: int
    _phase: int
    #: ``None`` until set: then the outcome is derived from how the block ended.
    outcome: Optional[Union[Outcome, int]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a Call is made by Balancer.call()")

    @property
    def id(self) -> int:
        """The selected invoker's id. The select happens when the ``with`` block is entered (not
        when :meth:`Balancer.call` returns, unlike the call objects of the other bindings):
        reading it before raises ``RuntimeError`` rather than giving an id no select made."""
        if self._id < 0:
            raise RuntimeError("Call.id is known once the `with` block is entered: the select happens there")
        return self._id

    def __enter__(self) -> "Call":
        if self._phase != _FRESH:
            raise RuntimeError(
                "a Call is one RPC and this one was already entered"
                + (" and has not ended" if self._phase == _OPEN else "")
                + ": make one with Balancer.call() for each RPC"
            )
        self._id = self._balancer.select(self._key, self._method, self._among, self._exclude)
        self._phase = _OPEN
        # Started after select: the elapsed time is the RPC's, which is what strategies compare.
        self._started_ns = perf_counter_ns()
        return self

    def stream(self, rpc: _Stream) -> _Stream:
        """Ties a grpcio call (a stream, sync or ``grpc.aio``) to this call, and returns it.

        ::

            with balancer.call(method="Watch") as call:
                for event in call.stream(stub.Watch(request)):
                    ...

        The stream then ends with the block. Still open when the block ends (a ``break``, a
        ``return``, an exception), it is cancelled (``rpc.cancel()``): this side gave it up; a
        block that ended normally is then reported cancelled, and with an exception the
        exception decides, as without a stream. A stream that has ended, in a block that ended
        normally, is reported by its own status (docs/outcomes.md): ``OK`` a success,
        ``CANCELLED`` after your own ``rpc.cancel()``, an error status you caught inside the
        block by the table (a ``RESOURCE_EXHAUSTED`` by its ``details()`` too, as when it is
        raised: gRPC's size check is no failure of the provider). ``call.outcome`` still wins. A ``grpc.aio`` stream's status is read
        by awaiting it, so use ``async with`` for one (under a plain ``with`` only whether it
        was cancelled is read). Duck-typed: ``rpc`` needs ``done()``, ``cancel()`` and
        ``code()``, as grpcio's call objects have; grpc is not imported.
        """
        for name in ("done", "cancel", "code"):
            if not callable(getattr(rpc, name, None)):
                raise TypeError(
                    "call.stream() takes a grpcio call object (with done(), cancel() and code()), "
                    f"not {type(rpc).__name__}"
                )
        self._stream = rpc
        return rpc

    def _end_stream(self, exc_type: Optional[Type[BaseException]]) -> Tuple[Optional[Outcome], Any]:
        """Ends the tracked stream with the block and says what it decides: (outcome, None)
        decided here, (None, status) its status decides (an awaitable for grpc.aio), (None,
        None) the block's own verdict stands. A stream still open is cancelled even when
        call.outcome is set; its status is read only when nothing else decides. Nothing raised
        here replaces the block's exception."""
        stream = self._stream
        try:
            if not stream.done():
                stream.cancel()  # abandoned by this side: it ends with the block
                return (_CANCELLED if exc_type is None else None), None
            if exc_type is not None or self.outcome is not None:
                return None, None  # the exception (usually the stream's own) or call.outcome decides
            return None, stream.code()
        except Exception:
            return None, None

    def _stream_cancelled(self) -> bool:
        try:
            return self._stream.cancelled() is True
        except Exception:
            return False

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:  # never swallows the exception
        elapsed_us = (perf_counter_ns() - self._started_ns) // 1000
        self._phase = _ENDED
        if exc_type is None and self.outcome is None and self._stream is None:
            # The common end, reported as _finish would, without its general path.
            self._balancer.report(self._id, elapsed_us, _SUCCESS, self._method)
            return
        decided: Optional[Outcome] = None
        if self._stream is not None:
            decided, status = self._end_stream(exc_type)
            if inspect.isawaitable(status):
                # A grpc.aio stream under a plain `with`: its status cannot be awaited here;
                # only whether this side cancelled it can be read.
                close = getattr(status, "close", None)
                if callable(close):
                    close()
                decided = _CANCELLED if self._stream_cancelled() else None
            elif status is not None:
                decided = _status_outcome(status, _SUCCESS)
                if _is_resource_exhausted(decided, status):
                    # As when the stream's error is raised out of the block: gRPC's size check.
                    try:
                        limited = _size_limit_outcome(self._stream)
                    except Exception:
                        limited = None
                    decided = decided if limited is None else limited
        self._finish(elapsed_us, decided, exc_type, exc)

    def _finish(
        self,
        elapsed_us: int,
        stream_outcome: Optional[Outcome],
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
    ) -> None:
        """Reports the call: call.outcome if set, else the tracked stream's, else the block's."""
        outcome = self.outcome
        if outcome is None:
            outcome = stream_outcome if stream_outcome is not None else _outcome_of(exc_type, exc)
        try:
            self._balancer.report(self._id, elapsed_us, outcome, self._method)
        except BalancerClosedError:
            # Closed (by another thread) during the call: the block's own exception is what
            # the caller must see, not that the report had nowhere to go.
            if exc_type is None:
                raise
        except (TypeError, UnknownOutcomeError) as error:
            if self.outcome is None:
                raise  # not the caller's outcome: a bug here, do not hide it
            # call.outcome is no outcome: the call still ends, as cancelled (nothing is known
            # of how it went), so it is not left counted in flight; the block's own exception,
            # if any, is what propagates.
            try:
                self._balancer.report(self._id, elapsed_us, _CANCELLED, self._method)
            except BalancerClosedError:
                pass
            if exc_type is None:
                if isinstance(error, TypeError):
                    raise TypeError(
                        f"call.outcome must be a polylb.Outcome or its int code, not {type(self.outcome).__name__}"
                    ) from None
                raise

    async def __aenter__(self) -> "Call":
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        if self._stream is None:
            self.__exit__(exc_type, exc, traceback)
            return
        elapsed_us = (perf_counter_ns() - self._started_ns) // 1000
        self._phase = _ENDED
        decided, status = self._end_stream(exc_type)
        # grpc.aio: code() is a coroutine; the stream is done.
        status = await self._awaited(status, elapsed_us, _CANCELLED, exc_type, exc)
        if status is not None:
            decided = _status_outcome(status, _SUCCESS)
            if _is_resource_exhausted(decided, status):
                # As when the stream's error is raised out of the block: gRPC's size check.
                try:
                    details = self._stream.details()
                except Exception:
                    details = None
                details = await self._awaited(details, elapsed_us, decided, exc_type, exc)
                limited = _size_limit_of(details)
                decided = decided if limited is None else limited
        self._finish(elapsed_us, decided, exc_type, exc)

    async def _awaited(
        self,
        value: Any,
        elapsed_us: int,
        if_cancelled: Optional[Outcome],
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
    ) -> Any:
        """``value``, awaited when it is awaitable; None when that raises. Cancelled meanwhile,
        the call still ends (reported ``if_cancelled``) before the cancel propagates."""
        if not inspect.isawaitable(value):
            return value
        try:
            return await value
        except Exception:
            return None
        except BaseException:
            self._finish(elapsed_us, if_cancelled, exc_type, exc)
            raise

    def __repr__(self) -> str:
        return f"<polylb.Call id={self._id} outcome={self.outcome!r}>"


def library_version() -> str:
    """The loaded libpolylb's version string, e.g. ``"0.1.0"``."""
    raw: Optional[bytes] = _ffi.lib.plb_version()
    return raw.decode("utf-8", "replace") if raw else ""


__all__: Tuple[str, ...] = ("Balancer", "Call", "Invoker", "build_config", "id_array", "library_version")
