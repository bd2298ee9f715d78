"""The asyncio balanced channel's multicallables and calls. Each call picks its endpoint when
it is made, runs as a grpc.aio call on that endpoint's channel, and is reported when grpc.aio
says it is done, by its final status, read by ``Call.stream`` as for any grpcio call."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, AsyncIterator, Callable, Generator, Optional, Set, Tuple

import grpc  # type: ignore[import-untyped, unused-ignore]
import grpc.aio  # type: ignore[import-untyped, unused-ignore]

from ..._call import Call
from ..._ffi import Outcome
from ..._outcomes import _AIO_LOCAL_CANCEL_DETAILS
from .. import _errors as _sync_errors
from .._calls import BalancedChannel, Picking, Retry, Shape, _cancel_current, _start_async, retrier
from .._errors import CLOSED
from .._members import Member
from ._errors import NoEndpointsError, Unsent

#: grpc.aio's details of a CANCELLED this side caused: its cancel() (also what a cancelled
#: awaiting task and the channel's close() use) and the collection of a dropped call.
_OWN_CANCEL_DETAILS = (_AIO_LOCAL_CANCEL_DETAILS, "Cancelled upon garbage collection!")

_OK = grpc.StatusCode.OK

# Reports waiting for a status that could not be read at once (see _ended): kept referenced.
_pending: Set["asyncio.Task[None]"] = set()


class _Ended:
    """A done grpc.aio call's status in the shape ``Call.stream`` reads a sync grpcio call's
    (its ``code()`` and ``details()`` plain values), so the core's rules judge it; ``cancelled()``
    says whether this side caused a CANCELLED (grpc.aio's own says so of the provider's too)."""

    __slots__ = ("_code", "_details")

    def __init__(self, code: Any, details: Any) -> None:
        self._code = code
        self._details = details

    def done(self) -> bool:
        return True

    def cancel(self) -> bool:
        return False

    def code(self) -> Any:
        return self._code

    def details(self) -> Any:
        return self._details

    def cancelled(self) -> bool:
        return self._details in _OWN_CANCEL_DETAILS


def _at_once(coroutine: Any) -> Tuple[bool, Any]:
    """(True, value) of a coroutine that returns without waiting, as a done grpc.aio call's
    ``code()`` and ``details()`` do; (False, None) if it would wait (it is closed then)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return True, stop.value
    except Exception:
        return True, None
    coroutine.close()
    return False, None


def _report(call: Call, code: Any, details: Any) -> None:
    try:
        if code is None:
            call.outcome = Outcome.CANCELLED  # no status to read: no verdict on the provider
        else:
            call.stream(_Ended(code, details))
        call.__exit__(None, None, None)
    except Exception:
        pass  # the balancer was closed meanwhile: nowhere to report, and grpc.aio would only log it


async def _report_later(call: Call, channel: BalancedChannel, member: Member, rpc: Any) -> None:
    try:
        try:
            code, details = await rpc.code(), await rpc.details()
        except Exception:
            code = details = None
        _report(call, code, details)
    finally:
        channel._members.release(member, on_channel_thread=True)


def _ended(call: Call, channel: BalancedChannel, member: Member, rpc: Any) -> None:
    """grpc.aio's done callback (on the event loop, before any awaiting task resumes): the
    status is set by then, so reading it needs no task of its own; should it ever need to wait,
    a task reads it."""
    ready, code = _at_once(rpc.code())
    if not ready:
        task = asyncio.get_running_loop().create_task(_report_later(call, channel, member, rpc))
        _pending.add(task)
        task.add_done_callback(_pending.discard)
        return
    try:
        if code is _OK:
            call.__exit__(None, None, None)  # the common end: a success, without reading details
        else:
            _report(call, code, _at_once(rpc.details())[1])
    except Exception:
        pass  # the balancer was closed meanwhile (as in _report)
    finally:
        channel._members.release(member, on_channel_thread=True)


def _start(channel: BalancedChannel, shape: Shape, method_id: int, key: Any, start: Callable[[Any], Any]) -> Tuple[Any, int]:
    """Picks an endpoint and starts the grpc.aio call there: (the call, its endpoint's id), or
    (an ended call, -1) with no endpoint (grpc.aio's multicallables never raise an RPC's error)."""
    if channel._members.closed:
        raise grpc.aio.UsageError(CLOSED)
    try:
        return _start_async(channel, shape, method_id, key, None, start, _ended)
    except _sync_errors.NoEndpointsError as error:
        return Unsent(NoEndpointsError(error.details())), -1


def _end_unstarted(rpc: Any) -> None:
    """Ends a grpc.aio call that raised a Python exception of this side's (metadata it could
    not encode: ``TypeError``; one the core refused: ``ExecuteBatchError``) instead of an RPC's
    error: grpc.aio leaves such a call undone for good (no status, no done callback), so it
    would stay in flight on its endpoint and keep that endpoint's channel from closing. Nothing
    was sent; ``cancel()`` ends it as this side's cancel, which reports it so."""
    try:
        if not rpc.done():
            rpc.cancel()
    except Exception:
        pass  # the caller's own exception is the one to see


class _Call:
    """What every call does: the grpc.aio call of its current attempt answers. (A call that is
    retried moves to its next attempt when it is awaited or read.)"""

    def __init__(self, rpc: Any, retry: Optional[Callable[[BaseException], Optional[Any]]] = None) -> None:
        self._current = [rpc]
        self._retry = retry

    @property
    def _rpc(self) -> Any:
        return self._current[0]

    def _next_attempt(self, error: BaseException) -> bool:
        replacement = None if self._retry is None else self._retry(error)
        if replacement is None:
            return False
        self._current[0] = replacement
        return True

    def cancelled(self) -> bool:
        return bool(self._rpc.cancelled())

    def done(self) -> bool:
        return bool(self._rpc.done())

    def time_remaining(self) -> Optional[float]:
        remaining: Optional[float] = self._rpc.time_remaining()
        return remaining

    def cancel(self) -> bool:
        return bool(self._rpc.cancel())

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        """``callback(call)`` when it is done; the call passed is this one while it is referenced
        elsewhere (a callback must not keep a dropped stream alive: see _Stream), else grpc.aio's."""
        this = weakref.ref(self)
        self._rpc.add_done_callback(lambda rpc: callback(this() or rpc))

    async def initial_metadata(self) -> Any:
        return await self._rpc.initial_metadata()

    async def trailing_metadata(self) -> Any:
        return await self._rpc.trailing_metadata()

    async def code(self) -> Any:
        return await self._rpc.code()

    async def details(self) -> Any:
        return await self._rpc.details()

    async def debug_error_string(self) -> Any:
        return await self._rpc.debug_error_string()

    async def wait_for_connection(self) -> None:
        await self._rpc.wait_for_connection()

    def __repr__(self) -> str:
        return f"<polylb.grpc.aio {type(self).__name__} of {self._rpc!r}>"


class _Response(_Call):
    """A unary response: awaiting the call gives it (and retries an ``UNAVAILABLE`` attempt)."""

    def __await__(self) -> Generator[Any, None, Any]:
        return self._awaiting()

    def _awaiting(self) -> Generator[Any, None, Any]:
        while True:
            rpc = self._rpc
            try:
                return (yield from rpc.__await__())
            except grpc.aio.AioRpcError as error:
                if not self._next_attempt(error):
                    raise
            except Exception:
                _end_unstarted(rpc)
                raise


class _Stream(_Call):
    """A response stream: ``async for`` or ``read()``. Dropping it cancels its RPC at once, as
    the sync channel's streams do: grpc.aio's own would be collected and cancelled, but the done
    callback that reports it holds it, so it would stay open and counted in flight."""

    def __init__(self, rpc: Any, retry: Optional[Callable[[BaseException], Optional[Any]]] = None) -> None:
        super().__init__(rpc, retry)
        self._received = False
        weakref.finalize(self, _cancel_current, self._current).atexit = False

    async def read(self) -> Any:
        while True:
            rpc = self._rpc
            try:
                message = await rpc.read()
            except grpc.aio.AioRpcError as error:
                if self._received or not self._next_attempt(error):
                    raise
                continue
            except Exception:
                _end_unstarted(rpc)
                raise
            self._received = True
            return message

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Any]:
        while True:
            message = await self.read()
            if message is grpc.aio.EOF:
                return
            yield message


class _Requests:
    """The request side of client and bidi streams (never retried: requests cannot be replayed)."""

    _rpc: Any

    async def write(self, request: Any) -> None:
        await self._rpc.write(request)

    async def done_writing(self) -> None:
        await self._rpc.done_writing()


class UnaryUnaryCall(_Response, grpc.aio.UnaryUnaryCall):  # type: ignore[misc, unused-ignore]
    pass


class UnaryStreamCall(_Stream, grpc.aio.UnaryStreamCall):  # type: ignore[misc, unused-ignore]
    pass


class StreamUnaryCall(_Requests, _Response, grpc.aio.StreamUnaryCall):  # type: ignore[misc, unused-ignore]
    pass


class StreamStreamCall(_Requests, _Stream, grpc.aio.StreamStreamCall):  # type: ignore[misc, unused-ignore]
    pass


class _MultiCallable(Picking):
    __slots__ = ()

    def _unary_request(
        self, request: Any, timeout: Optional[float], options: Any
    ) -> Tuple[Any, Optional[Callable[[BaseException], Optional[Any]]]]:
        """Starts a unary-request call; with ``retries``, also how to start its next attempt."""
        channel = self._channel
        key = self._key(request, options["metadata"])
        retry = Retry(channel._retries, timeout) if channel._retries else None

        def start(rpc: Any) -> Any:
            return rpc(request, timeout=timeout if retry is None else retry.timeout(), **options)

        rpc, picked = _start(channel, self._shape, self._method_id, key, start)
        if retry is None or picked < 0:
            return rpc, None
        return rpc, retrier(channel, self._shape, self._method_id, key, retry, start, picked, _ended)

    def _stream_request(self, request_iterator: Any, timeout: Optional[float], options: Any) -> Any:
        """Starts a client or bidi stream; its key comes from the metadata alone."""

        def start(rpc: Any) -> Any:
            return rpc(request_iterator, timeout=timeout, **options)

        return _start(self._channel, self._shape, self._method_id, self._key(None, options["metadata"]), start)[0]


class UnaryUnary(_MultiCallable, grpc.aio.UnaryUnaryMultiCallable):  # type: ignore[misc, unused-ignore]
    __slots__ = ()

    def __call__(
        self,
        request: Any,
        *,
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> UnaryUnaryCall:
        options = dict(metadata=metadata, credentials=credentials, wait_for_ready=wait_for_ready, compression=compression)
        return UnaryUnaryCall(*self._unary_request(request, timeout, options))


class UnaryStream(_MultiCallable, grpc.aio.UnaryStreamMultiCallable):  # type: ignore[misc, unused-ignore]
    """With ``retries``, a stream that fails with ``UNAVAILABLE`` before its first message is
    started again on an endpoint not tried yet when that message is read."""

    __slots__ = ()

    def __call__(
        self,
        request: Any,
        *,
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> UnaryStreamCall:
        options = dict(metadata=metadata, credentials=credentials, wait_for_ready=wait_for_ready, compression=compression)
        return UnaryStreamCall(*self._unary_request(request, timeout, options))


class StreamUnary(_MultiCallable, grpc.aio.StreamUnaryMultiCallable):  # type: ignore[misc, unused-ignore]
    __slots__ = ()

    def __call__(
        self,
        request_iterator: Any = None,
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> StreamUnaryCall:
        options = dict(metadata=metadata, credentials=credentials, wait_for_ready=wait_for_ready, compression=compression)
        return StreamUnaryCall(self._stream_request(request_iterator, timeout, options))


class StreamStream(_MultiCallable, grpc.aio.StreamStreamMultiCallable):  # type: ignore[misc, unused-ignore]
    __slots__ = ()

    def __call__(
        self,
        request_iterator: Any = None,
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> StreamStreamCall:
        options = dict(metadata=metadata, credentials=credentials, wait_for_ready=wait_for_ready, compression=compression)
        return StreamStreamCall(self._stream_request(request_iterator, timeout, options))
