""":class:`Invoker`, and its fields as the C struct ``plb_invoker`` takes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

from ._arguments import (
    _INT32_MAX,
    _INT32_MIN,
    _INT64_MAX,
    _INT64_MIN,
    _UINT64_END,
    _index,
    _library_text,
)
from ._errors import InvalidArgumentError, PolylbError, error_for
from ._ffi import Status


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


def _check_range(value: int, low: int, high: int, what: str) -> None:
    # ctypes silently wraps integers that overflow a C field; refuse them instead.
    if not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(
            Status.INVALID_ARGUMENT, f"{what} {value} does not fit its C type ({low}..{high})"
        )


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
