"""What the binding checks of a call's arguments before the library sees them: ints that must
fit their C types, text that must be UTF-8, id arrays, and ctypes' type errors named by parameter.

Shared by :class:`Balancer`, :class:`Invoker` and the config builder; nothing here calls the library.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any, Iterable, Sequence, Tuple, Union

from ._errors import InvalidUtf8Error, error_for
from ._ffi import Status, uint64_array

#: A hash key: bytes are used as they are, text as its UTF-8 encoding.
Key = Union[bytes, str, bytearray, memoryview]
#: A method: an id from :meth:`Balancer.method` (fastest), or its name (interned on first use).
Method = Union[int, str]
#: Invoker ids: any sequence of ints, or a prebuilt array from :func:`id_array` (fastest).
Ids = Union[Sequence[int], "ctypes.Array[ctypes.c_uint64]", Iterable[int]]
ConfigValue = Union[str, bytes, int, float, bool]

_UINT64_END = 1 << 64
#: An id no invoker can have (above INT64_MAX).
_NO_INVOKER = _UINT64_END - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


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


def utf8_flaw(data: bytes) -> str:
    """The library's words for the first flaw of ``data``, which is not UTF-8 (Rust's
    ``Utf8Error``): for a message the library gives no text for (a method name's lookup returns
    only a status) or that Python finds first (a key), worded as an address's or a config's.
    Python's decoder ends an invalid sequence where Rust's does (Unicode's maximal subpart)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.reason == "unexpected end of data":
            return f"incomplete utf-8 byte sequence from index {error.start}"
        return f"invalid utf-8 sequence of {error.end - error.start} bytes from index {error.start}"
    raise ValueError("utf8_flaw: the bytes are UTF-8")


def _utf8(text: Union[str, bytes], what: str) -> bytes:
    """Text as UTF-8; bytes pass unchanged so the library, not Python, judges their encoding. A
    str with a lone surrogate has no UTF-8 form; the message is the one for its surrogate-escaped
    bytes, as for an address (and as Java words it)."""
    if isinstance(text, bytes):
        return text
    if isinstance(text, str):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            escaped = text.encode("utf-8", "surrogatepass")
            raise InvalidUtf8Error(
                Status.INVALID_UTF8, f"{what} is not valid UTF-8: {utf8_flaw(escaped)}"
            ) from None
    raise TypeError(f"{what} must be str or bytes, not {type(text).__name__}")


def _utf8_text(data: bytes, what: str) -> str:
    """UTF-8 bytes as text, for a string the binding assembles (a config)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidUtf8Error(Status.INVALID_UTF8, f"value of {what!r} is not valid UTF-8: {utf8_flaw(data)}") from None


def _key_bytes(key: Key) -> bytes:
    if isinstance(key, str):  # also str subclasses (numpy.str_, ...)
        return _utf8(key, "key")
    if isinstance(key, (bytes, bytearray, memoryview)):  # bytes subclasses too (numpy.bytes_, ...)
        return bytes(key)
    raise TypeError(f"key must be bytes or str, not {type(key).__name__}")


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


def _refuse_bools(**values: Any) -> None:
    """Raises TypeError for a bool among int arguments (ids, elapsed times): an int
    subclass, it would pass as 1 or 0, where the Go and Java bindings' types refuse it."""
    for name, value in values.items():
        if value.__class__ is bool:
            raise TypeError(f"{name} must be an int, not bool")


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
_RECONNECT_PARAMS = ("balancer", "id", "now_us")
