"""The balanced channel's multicallables: each call picks an endpoint, runs on its channel and
reports how it ended, through ``Balancer.call`` so polylb's reading of gRPC statuses applies."""

from __future__ import annotations

import functools
import weakref
from time import monotonic
from typing import Any, Callable, Iterator, List, Optional, Protocol, Tuple

import grpc  # type: ignore[import-untyped, unused-ignore]

from .._balancer import Balancer
from .._call import Call
from .._errors import BalancerClosedError, NoCandidateError, NoProviderError
from .._ffi import Outcome
from ._errors import CLOSED, NoEndpointsError
from ._members import KeyFunction, Member, Members

_CANCELLED = Outcome.CANCELLED

#: How often a call picks again when the id it picked left the set in the meantime (each pick
#: after an update's swap comes from the new set, so more than one is already rare).
_STALE_PICKS = 8

#: (the grpc.Channel method, the method path, serializer, deserializer, _registered_method)
Shape = Tuple[str, str, Any, Any, bool]


class BalancedChannel(Protocol):
    """What the calls need of a balanced channel, sync (polylb.grpc) or asyncio (polylb.grpc.aio)."""

    _balancer: Balancer
    _members: Members
    _key: Optional[KeyFunction]
    _retries: int


def _open(channel: BalancedChannel, method_id: int, key: Any, exclude: Optional[List[int]]) -> Tuple[Call, Member]:
    """Picks an endpoint and counts the call on it: the Call is entered (selected), the member
    acquired. Raises NoEndpointsError with no endpoint, NoCandidateError when ``exclude`` left
    none."""
    members = channel._members
    if members.closed:
        raise ValueError(CLOSED)
    for _ in range(_STALE_PICKS):
        call = channel._balancer.call(key, method_id, exclude=exclude)
        try:
            call.__enter__()
        except NoProviderError:
            raise NoEndpointsError() from None
        member = members.acquire(call.id)
        if member is not None:
            return call, member
        # Picked from the set an update has just replaced: nothing was sent, pick again.
        call.outcome = _CANCELLED
        call.__exit__(None, None, None)
    raise NoEndpointsError("polylb balanced channel: the endpoints kept changing while the call picked one")


def _end(call: Call, channel: BalancedChannel, member: Member, error: Optional[BaseException]) -> None:
    try:
        if error is not None and member.closed and not isinstance(error, grpc.RpcError):
            # close() ran between the pick and the send (a drain never closes a channel with a
            # call on it): grpcio refused the closed channel, nothing was sent. A cancel.
            call.outcome = _CANCELLED
        try:
            call.__exit__(None if error is None else type(error), error, None)
        except BalancerClosedError:
            # The balancer was closed during the call: nowhere to report it, but the provider
            # answered, and its answer is the caller's (as for futures and streams, _ended).
            if error is None:
                return
            raise
    finally:
        channel._members.release(member)


def _ended(call: Call, channel: BalancedChannel, member: Member, rpc: Any) -> None:
    """grpcio's done callback of a future or stream: its status decides the outcome, read as
    ``Call.stream`` reads a stream's (a cancel by this side, its garbage collection included, is
    a cancel; a provider's error status by the table)."""
    try:
        call.stream(rpc)
        call.__exit__(None, None, None)
    except Exception:
        pass  # the balancer was closed meanwhile: nowhere to report, and grpcio would only log it
    finally:
        channel._members.release(member, on_channel_thread=True)




class Retry:
    """``retries`` more attempts for a call that failed with ``UNAVAILABLE``, each on an endpoint
    not tried yet, within the caller's overall deadline."""

    __slots__ = ("left", "deadline", "tried")

    def __init__(self, retries: int, timeout: Optional[float]) -> None:
        self.left = retries
        self.deadline = None if timeout is None else monotonic() + timeout
        self.tried: List[int] = []

    def timeout(self) -> Optional[float]:
        """What is left of the caller's timeout (never a fresh one per attempt)."""
        return None if self.deadline is None else max(0.0, self.deadline - monotonic())

    def again(self, error: BaseException, failed_id: int) -> bool:
        """Whether to try another endpoint after ``error`` on ``failed_id``. Only UNAVAILABLE:
        DEADLINE_EXCEEDED spent the caller's time, and any other status is the provider's answer
        or an error retrying would repeat."""
        if self.left <= 0 or not isinstance(error, grpc.RpcError):
            return False
        try:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                return False
        except Exception:
            return False
        remaining = self.timeout()
        if remaining is not None and remaining <= 0:
            return False
        self.left -= 1
        self.tried.append(failed_id)
        return True


#: ``ended(call, channel, member, rpc)``: grpcio's done callback of a call started by _start_async.
Ended = Callable[[Call, BalancedChannel, Member, Any], None]


def _start_async(
    channel: BalancedChannel,
    shape: Shape,
    method_id: int,
    key: Any,
    exclude: Optional[List[int]],
    start: Callable[[Any], Any],
    ended: Ended = _ended,
) -> Tuple[Any, int]:
    """Starts a future or stream (or a grpc.aio call) on a picked endpoint; its end is reported
    when grpcio says it is done, by ``ended``. Returns the grpcio call and the endpoint's id."""
    call, member = _open(channel, method_id, key, exclude)
    try:
        rpc = start(member.multicallable(shape))
    except BaseException as error:
        _end(call, channel, member, error)
        raise
    rpc.add_done_callback(functools.partial(ended, call, channel, member))
    return rpc, call.id


def retrier(
    channel: BalancedChannel,
    shape: Shape,
    method_id: int,
    key: Any,
    retry: Retry,
    start: Callable[[Any], Any],
    first_id: int,
    ended: Ended = _ended,
) -> Callable[[BaseException], Optional[Any]]:
    """``again(error)``: the next attempt of a call whose attempt failed with ``error`` (started
    on an endpoint not tried yet), or None when ``retry`` says no or every endpoint was tried."""
    attempt = [first_id]

    def again(error: BaseException) -> Optional[Any]:
        if not retry.again(error, attempt[0]):
            return None
        try:
            replacement, attempt[0] = _start_async(channel, shape, method_id, key, retry.tried, start, ended)
        except (NoCandidateError, NoEndpointsError):
            return None  # every endpoint tried: the first error stands
        except ValueError:
            if not channel._members.closed:
                raise
            return None  # the channel was closed since the attempt failed: its error stands
        return replacement

    return again


class Picking:
    """A multicallable's method, as the balancer knows it, and each call's hash key."""

    __slots__ = ("_channel", "_shape", "_method", "_method_id")

    def __init__(self, channel: BalancedChannel, shape: Shape) -> None:
        self._channel = channel
        self._shape = shape
        self._method = shape[1]
        self._method_id = channel._balancer.method(shape[1])

    def _key(self, request: Any, metadata: Any) -> Any:
        key = self._channel._key
        return None if key is None else key(self._method, request, metadata)


class _MultiCallable(Picking):
    __slots__ = ()

    def _future(self, request: Any, key: Any, **arguments: Any) -> Any:
        """A unary-response call's ``future()`` on a picked endpoint (never retried: the future
        is the caller's at once); with no endpoint, an ended call, as grpcio's ``future()``
        returns its failed calls instead of raising."""
        try:
            future, _ = _start_async(
                self._channel, self._shape, self._method_id, key, None, lambda rpc: rpc.future(request, **arguments)
            )
        except NoEndpointsError as error:
            return error
        return future

    def _blocking(self, with_call: bool, request: Any, key: Any, retry: Optional[Retry], timeout: Optional[float], **options: Any) -> Any:
        """A blocking unary-response call (``with_call``: grpcio's ``with_call``) on a picked
        endpoint; with ``retry``, an ``UNAVAILABLE`` one is tried again on another endpoint."""
        channel = self._channel
        exclude: Optional[List[int]] = None
        failed: Optional[BaseException] = None
        while True:
            try:
                call, member = _open(channel, self._method_id, key, exclude)
            except (NoCandidateError, NoEndpointsError):
                if failed is None:
                    raise
                raise failed from None  # every endpoint tried (or none left): the last error stands
            try:
                rpc = member.multicallable(self._shape)
                send = rpc.with_call if with_call else rpc
                result = send(request, timeout=timeout if retry is None else retry.timeout(), **options)
            except BaseException as error:
                _end(call, channel, member, error)
                if retry is None or not retry.again(error, call.id):
                    raise
                failed = error
                exclude = retry.tried
                continue
            _end(call, channel, member, None)
            return result


class UnaryUnary(_MultiCallable, grpc.UnaryUnaryMultiCallable):  # type: ignore[misc, unused-ignore]
    __slots__ = ()

    def __call__(
        self,
        request: Any,
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> Any:
        return self._unary(
            False, request, timeout, metadata, credentials=credentials, wait_for_ready=wait_for_ready, compression=compression
        )

    def with_call(
        self,
        request: Any,
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> Any:
        return self._unary(
            True, request, timeout, metadata, credentials=credentials, wait_for_ready=wait_for_ready, compression=compression
        )

    def _unary(self, with_call: bool, request: Any, timeout: Optional[float], metadata: Any, **options: Any) -> Any:
        key = self._key(request, metadata)
        retry = Retry(self._channel._retries, timeout) if self._channel._retries else None
        return self._blocking(with_call, request, key, retry, timeout, metadata=metadata, **options)

    def future(
        self,
        request: Any,
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> Any:
        return self._future(
            request,
            self._key(request, metadata),
            timeout=timeout,
            metadata=metadata,
            credentials=credentials,
            wait_for_ready=wait_for_ready,
            compression=compression,
        )


class StreamUnary(_MultiCallable, grpc.StreamUnaryMultiCallable):  # type: ignore[misc, unused-ignore]
    """Client streams: the request iterator cannot be replayed, so there is no retry, and the
    hash key comes from the metadata only (``key(method, None, metadata)``)."""

    __slots__ = ()

    def __call__(
        self,
        request_iterator: Iterator[Any],
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> Any:
        return self._stream(
            False, request_iterator, timeout, metadata, credentials=credentials, wait_for_ready=wait_for_ready, compression=compression
        )

    def with_call(
        self,
        request_iterator: Iterator[Any],
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> Any:
        return self._stream(
            True, request_iterator, timeout, metadata, credentials=credentials, wait_for_ready=wait_for_ready, compression=compression
        )

    def _stream(self, with_call: bool, requests: Iterator[Any], timeout: Optional[float], metadata: Any, **options: Any) -> Any:
        key = self._key(None, metadata)
        return self._blocking(with_call, requests, key, None, timeout, metadata=metadata, **options)

    def future(
        self,
        request_iterator: Iterator[Any],
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> Any:
        return self._future(
            request_iterator,
            self._key(None, metadata),
            timeout=timeout,
            metadata=metadata,
            credentials=credentials,
            wait_for_ready=wait_for_ready,
            compression=compression,
        )


def _cancel_current(current: List[Any]) -> None:
    current[0].cancel()


class ResponseStream(grpc.Call, grpc.Future):  # type: ignore[misc, unused-ignore]
    """A response stream (unary-stream, stream-stream) on one endpoint, as grpcio's: iterate it
    and use it as a ``grpc.Call`` / ``grpc.Future``. Its end is reported when grpcio says the RPC
    is done: read to the end, failed, cancelled, or dropped unread (dropping this object cancels
    the RPC, as grpcio's own stream does when it is garbage-collected, so an abandoned stream is
    reported cancelled and its endpoint's channel can close). ``add_done_callback`` and
    ``add_callback`` go to the underlying grpcio call (a callback gets that call, not this
    object, which a callback must not keep alive)."""

    def __init__(self, rpc: Any, retry: Optional[Callable[[BaseException], Optional[Any]]] = None) -> None:
        self._current = [rpc]
        self._retry = retry
        self._received = False
        finalizer = weakref.finalize(self, _cancel_current, self._current)
        finalizer.atexit = False

    @property
    def _rpc(self) -> Any:
        return self._current[0]

    def __iter__(self) -> "ResponseStream":
        return self

    def __next__(self) -> Any:
        while True:
            try:
                message = next(self._current[0])
            except grpc.RpcError as error:
                if self._received or self._retry is None:
                    raise
                replacement = self._retry(error)
                if replacement is None:
                    raise
                self._current[0] = replacement
                continue
            self._received = True
            return message

    def next(self) -> Any:  # grpcio's streams have it too
        return self.__next__()

    def is_active(self) -> bool:
        return bool(self._rpc.is_active())

    def time_remaining(self) -> Optional[float]:
        remaining: Optional[float] = self._rpc.time_remaining()
        return remaining

    def cancel(self) -> bool:
        return bool(self._rpc.cancel())

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return bool(self._rpc.add_callback(callback))

    def initial_metadata(self) -> Any:
        return self._rpc.initial_metadata()

    def trailing_metadata(self) -> Any:
        return self._rpc.trailing_metadata()

    def code(self) -> Any:
        return self._rpc.code()

    def details(self) -> Any:
        return self._rpc.details()

    def debug_error_string(self) -> Any:
        return self._rpc.debug_error_string()

    def cancelled(self) -> bool:
        return bool(self._rpc.cancelled())

    def running(self) -> bool:
        return bool(self._rpc.running())

    def done(self) -> bool:
        return bool(self._rpc.done())

    def result(self, timeout: Optional[float] = None) -> Any:
        return self._rpc.result(timeout)

    def exception(self, timeout: Optional[float] = None) -> Any:
        return self._rpc.exception(timeout)

    def traceback(self, timeout: Optional[float] = None) -> Any:
        return self._rpc.traceback(timeout)

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        self._rpc.add_done_callback(fn)


class UnaryStream(_MultiCallable, grpc.UnaryStreamMultiCallable):  # type: ignore[misc, unused-ignore]
    """Server streams. With ``retries``, a stream that fails with ``UNAVAILABLE`` before its
    first message is started again on an endpoint not tried yet, when that first message is
    read (nothing was delivered, so the caller sees one stream)."""

    __slots__ = ()

    def __call__(
        self,
        request: Any,
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> Any:
        channel = self._channel
        key = self._key(request, metadata)
        retry = Retry(channel._retries, timeout) if channel._retries else None

        def start(rpc: Any) -> Any:
            return rpc(
                request,
                timeout=timeout if retry is None else retry.timeout(),
                metadata=metadata,
                credentials=credentials,
                wait_for_ready=wait_for_ready,
                compression=compression,
            )

        try:
            rpc, picked = _start_async(channel, self._shape, self._method_id, key, None, start)
        except NoEndpointsError as error:
            return error
        if retry is None:
            return ResponseStream(rpc)
        return ResponseStream(rpc, retrier(channel, self._shape, self._method_id, key, retry, start, picked))


class StreamStream(_MultiCallable, grpc.StreamStreamMultiCallable):  # type: ignore[misc, unused-ignore]
    """Bidi streams: no retry (requests cannot be replayed); the key from the metadata only."""

    __slots__ = ()

    def __call__(
        self,
        request_iterator: Iterator[Any],
        timeout: Optional[float] = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: Optional[bool] = None,
        compression: Any = None,
    ) -> Any:
        def start(rpc: Any) -> Any:
            return rpc(
                request_iterator,
                timeout=timeout,
                metadata=metadata,
                credentials=credentials,
                wait_for_ready=wait_for_ready,
                compression=compression,
            )

        try:
            rpc, _ = _start_async(self._channel, self._shape, self._method_id, self._key(None, metadata), None, start)
        except NoEndpointsError as error:
            return error
        return ResponseStream(rpc)
