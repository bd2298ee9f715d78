""":class:`Call`: one RPC as a context manager, selected on entry and reported on exit."""

from __future__ import annotations

import ctypes  # noqa: F401 (resolves the `ctypes.Array` in the Ids hint at run time: get_type_hints)
import inspect
from time import perf_counter_ns
from types import TracebackType
from typing import Any, Optional, Protocol, Tuple, Type, TypeVar, Union

from ._arguments import Ids, Key, Method
from ._errors import BalancerClosedError, UnknownOutcomeError
from ._ffi import Outcome
from ._outcomes import (
    _AIO_LOCAL_CANCEL_DETAILS,
    _CANCELLED,
    _SUCCESS,
    _is_cancelled,
    _is_internal,
    _is_resource_exhausted,
    _not_serialized,
    _outcome_of,
    _own_cancel,
    _size_limit_of,
    _size_limit_outcome,
    _status_outcome,
    _sync_details,
)


class _Balancing(Protocol):
    """What a Call needs of its :class:`Balancer` (named without importing it: it imports this)."""

    def select(
        self,
        key: Optional[Key] = None,
        method: Method = 0,
        among: Optional[Ids] = None,
        exclude: Optional[Ids] = None,
    ) -> int: ...

    def report(self, id: int, elapsed_us: int, outcome: Union[Outcome, int], method: Method = 0) -> None: ...


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
    _balancer: _Balancing
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
        ``CANCELLED`` a cancel after your own ``rpc.cancel()`` and a failure when the provider
        ended it so, an error status you caught inside the
        block by the table (a ``RESOURCE_EXHAUSTED`` by its ``details()`` too, as when it is
        raised: gRPC's size check is no failure of the provider). ``call.outcome`` still wins. A ``grpc.aio`` stream's status is read
        by awaiting it, so use ``async with`` for one (under a plain ``with`` only its
        ``cancelled()`` is read, which grpc.aio also says of a provider's ``CANCELLED``: such a
        stream is then reported cancelled). Duck-typed: ``rpc`` needs ``done()``, ``cancel()`` and
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
                # only cancelled() can be read, which grpc.aio says of any CANCELLED status (the
                # provider's too: whose it was is in the details, to be awaited as well).
                close = getattr(status, "close", None)
                if callable(close):
                    close()
                decided = _CANCELLED if self._stream_cancelled() else None
            elif status is not None:
                decided = _status_outcome(status, _SUCCESS)
                if _is_cancelled(decided, status):
                    # A cancel only if this side cancelled it (a sync stream's cancelled(), or
                    # its channel closed by this side), else the provider ended it: a failure
                    # (as when it is raised).
                    decided = _CANCELLED if _own_cancel(self._stream) else decided
                elif _is_resource_exhausted(decided, status):
                    # As when the stream's error is raised out of the block: gRPC's size check.
                    try:
                        limited = _size_limit_outcome(self._stream)
                    except Exception:
                        limited = None
                    decided = decided if limited is None else limited
                elif _is_internal(decided, status):
                    # A request this side could not encode (as when it is raised): a cancel.
                    try:
                        details = _sync_details(self._stream)
                    except Exception:
                        details = None
                    decided = _CANCELLED if _not_serialized(details) else decided
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
        aio = inspect.isawaitable(status)
        # grpc.aio: code() is a coroutine; the stream is done.
        status = await self._awaited(status, elapsed_us, _CANCELLED, exc_type, exc)
        if status is not None:
            decided = _status_outcome(status, _SUCCESS)
            if _is_cancelled(decided, status):
                # A cancel only if this side cancelled it; else the provider ended it: a
                # failure (as when it is raised). A grpc.aio call's cancelled() is True for any
                # CANCELLED status, so its details tell: grpc.aio's cancel() sets its own.
                if aio:
                    try:
                        details = self._stream.details()
                    except Exception:
                        details = None
                    details = await self._awaited(details, elapsed_us, _CANCELLED, exc_type, exc)
                    own = isinstance(details, str) and details == _AIO_LOCAL_CANCEL_DETAILS
                else:
                    own = _own_cancel(self._stream)
                decided = _CANCELLED if own else decided
            elif _is_resource_exhausted(decided, status):
                # As when the stream's error is raised out of the block: gRPC's size check.
                try:
                    details = self._stream.details()
                except Exception:
                    details = None
                details = await self._awaited(details, elapsed_us, decided, exc_type, exc)
                limited = _size_limit_of(details)
                decided = decided if limited is None else limited
            elif _is_internal(decided, status):
                # A request this side could not encode (as when it is raised): a cancel.
                try:
                    details = self._stream.details()
                except Exception:
                    details = None
                details = await self._awaited(details, elapsed_us, decided, exc_type, exc)
                decided = _CANCELLED if _not_serialized(details) else decided
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
            try:
                self._finish(elapsed_us, if_cancelled, exc_type, exc)
            except BalancerClosedError:
                pass  # closed meanwhile: the cancellation is what the caller must see
            raise

    def __repr__(self) -> str:
        return f"<polylb.Call id={self._id} outcome={self.outcome!r}>"
