"""The Pythonic face of libpolylb: :class:`Balancer`, which owns the native handle.

This module only marshals arguments, owns the native handle and turns status codes into
exceptions; every balancing decision is made by the library. :class:`Invoker` is in
``_invoker``, :class:`Call` in ``_call``, argument checks in ``_arguments``.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import weakref
from ctypes import byref, c_size_t, c_uint32, c_void_p, create_string_buffer
from types import TracebackType
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Type, Union

from . import _ffi
from ._arguments import (
    _INT64_MAX,
    _INT64_MIN,
    _LOAD_PARAMS,
    _RECONNECT_PARAMS,
    _METRICS_PARAMS,
    _NO_INVOKER,
    _REPORT_PARAMS,
    _SELECT_AMONG_PARAMS,
    _SELECT_PARAMS,
    _STATS_PARAMS,
    _UINT64_END,
    ConfigValue,
    Ids,
    Key,
    Method,
    _check_doubles,
    _id_argument,
    _index,
    _key_bytes,
    _range_status,
    _refuse_bools,
    _type_error,
    _utf8,
    utf8_flaw,
)
from ._call import _FRESH, Call
from ._config import build_config
from ._errors import BalancerClosedError, InvalidArgumentError, InvalidUtf8Error, PolylbError, error_for
from ._ffi import Outcome, Status, invoker_array
from ._invoker import Invoker, _to_row, _update_error

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

_new_call = object.__new__

# The arguments declared double, whose bad values a message calls not "finite and >= 0".
_FLOAT_ARGUMENTS = frozenset(("cpu_load", "qps", "eps", "utilization"))

#: The library's clock, for the narrow calls: tested with `is`, which costs what `== 0` does
#: but takes only the int 0 (CPython's one cached object for it); `0.0 == 0` is true, and a
#: float then skipped the type check of the declared call. Any other zero (False, an IntEnum,
#: NumPy's) takes the declared call, which checks it.
_LIBRARY_CLOCK = 0
# The first buffer for a cold call's message; Balancer() asks again with a larger one when the
# message filled it (update's messages are short).
_MESSAGE_CAPACITY = 1024
# The largest buffer a cut message is asked for again with (the library bounds its messages well
# below this: it quotes at most 512 characters of the text at fault).
_MESSAGE_LIMIT = 1 << 20
_FIRST_STATS_CAPACITY = 4096


def _message(buffer: "ctypes.Array[ctypes.c_char]", length: c_size_t) -> str:
    # *len is what was written without the NUL; min() also keeps a library that reported the
    # untruncated length from making us read past what it wrote.
    used = min(length.value, len(buffer) - 1)
    return buffer.raw[:used].decode("utf-8", "replace")


def _message_filled(capacity: int, length: c_size_t) -> bool:
    # *len is what was written without the NUL; the library cuts a long message at a character
    # boundary, leaving up to 3 bytes of the buffer unused besides the NUL.
    return length.value + 4 >= capacity


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
        self._config = ""  # until build_config has made it
        self._update_lock = threading.Lock()
        self._methods: Dict[str, int] = {"": 0}
        self._stats_capacity = _FIRST_STATS_CAPACITY
        raw = build_config(loadbalance, config, params)
        self._config = raw.decode("utf-8", "replace")
        out = c_void_p()
        capacity = _MESSAGE_CAPACITY
        while True:
            message = create_string_buffer(capacity)
            message_len = c_size_t()
            status = _ffi.lib.plb_balancer_new(
                raw, len(raw), byref(out), message, capacity, byref(message_len)
            )
            # A message that filled the buffer may have been cut (at a character boundary, so
            # up to 3 bytes short of it): ask again with a larger one, as polylb.hpp does, so
            # that the message is the library's whole text, as in the Java and Rust APIs.
            if not status or not _message_filled(capacity, message_len) or capacity >= _MESSAGE_LIMIT:
                break
            capacity *= 4
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
                if name in _FLOAT_ARGUMENTS:
                    # Declared double: an int is judged as the double it becomes (_check_doubles
                    # has refused one too large for a double).
                    try:
                        number = float(value)
                    except (TypeError, ValueError, OverflowError):
                        continue
                    bad = not number >= 0 or number == float("inf")  # NaN too
                else:
                    value = _index(value)  # NumPy's integers are named as ints are
                    low = _INT64_MIN if name == "now_us" else 0
                    bad = isinstance(value, int) and not low <= value <= _INT64_MAX
                if bad:
                    if name == "now_us":
                        want = "an int64 clock"
                    elif name in _FLOAT_ARGUMENTS:
                        want = "finite and >= 0"
                    else:
                        # An int64 time: one too large for it is not "< 0".
                        want = ">= 0" if value < 0 else "0..2**63-1"
                    return error_for(status, f"invalid argument: {name} = {value!r} (want {want})")
        return error_for(status)

    def _check_doubles(self, **numbers: Any) -> None:
        # A closed balancer is what every other failure of a call on it reports.
        try:
            _check_doubles(**numbers)
        except InvalidArgumentError:
            if self._handle is None:
                raise BalancerClosedError() from None
            raise

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
        if status == Status.INVALID_UTF8:  # the lookup gives a status only; the words are ours
            raise InvalidUtf8Error(status, f"method name is not valid UTF-8: {utf8_flaw(raw)}")
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
                raise BalancerClosedError() if self._handle is None else error_for(status)
            break
        if self._handle is None:
            # close() ran meanwhile: it marks the balancer closed before it empties the set, so a
            # snapshot that may have seen it emptied is never returned as the balancer's state.
            raise BalancerClosedError()
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
            # `not x >> 32` is the cheapest test of 0 <= x < 2**32 (a negative x shifts to -1)
            # that allocates nothing: the shift of such an x is the cached 0, where `x | y` is
            # a new int whenever it passes 256 (CPython caches -5..256 only).
            if now_us is _LIBRARY_CLOCK and not key_len >> 32 and not method >> 32:
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
        # what ctypes would wrap. A bool outcome (an int subclass: True would pass as FAILURE)
        # takes the declared call too, which refuses it; the class check costs about 15 ns.
        try:
            if (
                now_us is _LIBRARY_CLOCK
                and not elapsed_us >> 32
                and not id >> 32
                and not method >> 32
                and not outcome >> 2
                and outcome.__class__ is not bool
            ):
                # The common case, all three below 2**32, each tested by its own shift (the
                # cached 0): `not (elapsed_us | method | id) >> 32` made a new int of the `|`
                # whenever it passed 256, so a report of any call slower than about 250 µs
                # allocated 32-64 B. The id is its own low half. `id & 0xFFFF_FFFF` would
                # allocate an int even for a small id (the constant has two 30-bit digits;
                # CPython returns the cached small int and frees the new one).
                status = _plb_report32(self._hot_handle, method, 0, id, elapsed_us, outcome)
            elif (
                now_us is _LIBRARY_CLOCK
                and not elapsed_us >> 32
                and not outcome >> 2
                and outcome.__class__ is not bool
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
        if outcome.__class__ is bool:
            raise TypeError("outcome must be a polylb.Outcome or its int code, not bool")
        # A bool id or time is refused here, where types are checked; the narrow call above
        # takes one as its int (checking there would cost every report).
        _refuse_bools(id=id, elapsed_us=elapsed_us)
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
        # In the order the Go and Java bindings name a bad one.
        named = {"cpu_load": cpu_load, "rt_us": rt_us, "provider_time_ms": provider_time_ms, "now_us": now_us}
        _refuse_bools(id=id, provider_time_ms=provider_time_ms, rt_us=rt_us)
        status = _range_status(method, provider_time_ms, rt_us, now_us)
        if status:
            raise self._hot_error(status, **named)
        self._check_doubles(cpu_load=cpu_load)
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
        _refuse_bools(id=id)
        if _range_status(0, now_us):
            raise self._load_error(Status.INVALID_ARGUMENT, named)
        self._check_doubles(qps=qps, eps=eps, utilization=utilization)
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

    def report_reconnect(self, id: int, now_us: int = 0) -> None:
        """Says that invoker ``id``'s connection was established again (a gRPC subchannel READY
        after another state).

        Under ``orca`` it restarts the invoker's run of load reports, as gRPC's
        ``weighted_round_robin`` (gRFC A58) does: its weight stops counting at the next pick, and
        its next :meth:`report_load` starts a new blackout (``orca.blackoutMs``), for the server
        behind a reconnect may be a restarted, cold process. An id not in the set, and other
        strategies, accept and ignore it. ``now_us`` (0: the library's clock) must fit an int64.
        """
        _refuse_bools(id=id)
        if _range_status(0, now_us):
            raise self._hot_error(Status.INVALID_ARGUMENT, now_us=now_us)
        id = _index(id)
        if isinstance(id, int) and not 0 <= id < _UINT64_END:
            # As in report_load: an id outside 64 bits names no invoker (ctypes would wrap it).
            id = _NO_INVOKER
        try:
            status: int = _ffi.lib.plb_report_reconnect(self._handle, id, now_us)
        except ctypes.ArgumentError as error:
            raise _type_error(error, _RECONNECT_PARAMS) from None
        if status:
            raise self._hot_error(status, now_us=now_us)

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
        ``DEADLINE_EXCEEDED`` timeout, ``CANCELLED`` cancelled after this side's cancel (the
        error's ``cancelled()`` is True, or its sync channel was closed by this side: the details
        "Channel closed!") and failure when the provider sent it, and ``UNAVAILABLE``,
        ``RESOURCE_EXHAUSTED``, ``UNIMPLEMENTED``, ``INTERNAL``, ``UNKNOWN``, ``DATA_LOSS``
        failure; a sync future's ``grpc.FutureCancelledError`` (after this side's ``cancel()``)
        is cancelled and ``grpc.FutureTimeoutError`` (its wait ran out) timeout. Any other
        exception (or a gRPC error whose status cannot be read): timeout on
        ``TimeoutError`` (asyncio's and concurrent.futures' too) or an exception whose chain
        (``__cause__``, else ``__context__``; a ``URLError``'s ``reason``; an exception group's
        members) holds one, failure on any other ``Exception`` and cancelled on ``BaseException``s
        that are not ``Exception``s (``KeyboardInterrupt``, ``asyncio.CancelledError``). An
        exception group (``asyncio.TaskGroup``'s) is read by its members, each as if raised
        alone: a timeout among them first, then a cancel, then a failure, else success. Set
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


def library_version() -> str:
    """The loaded libpolylb's version string, e.g. ``"0.1.0"``."""
    raw: Optional[bytes] = _ffi.lib.plb_version()
    return raw.decode("utf-8", "replace") if raw else ""


__all__: Tuple[str, ...] = ("Balancer", "library_version")
