""":class:`BalancedChannel`: a ``grpc.Channel`` over one channel per endpoint, balanced by polylb."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Callable, Dict, Iterable, Optional, Type, Union

import grpc  # type: ignore[import-untyped, unused-ignore]

from .._balancer import Balancer
from .._invoker import Invoker
from ._calls import StreamStream, StreamUnary, UnaryStream, UnaryUnary
from ._connectivity import ConnectivityWatch
from ._members import ChannelFactory, Endpoint, KeyFunction, Members


def check_arguments(balancer: Balancer, retries: int) -> None:
    """The constructor's checks, shared with polylb.grpc.aio's channel."""
    if not isinstance(balancer, Balancer):
        raise TypeError(f"balancer must be a polylb.Balancer, not {type(balancer).__name__}")
    if retries.__class__ is not int or retries < 0:
        raise ValueError(f"retries must be an int >= 0, not {retries!r}")


class BalancedChannel(grpc.Channel):  # type: ignore[misc, unused-ignore]
    """A ``grpc.Channel`` that sends each call to an endpoint ``balancer`` picks, on that
    endpoint's own grpc channel, and reports how the call ended to the balancer.

    ``update(endpoints)`` sets the endpoints (call it, not ``balancer.update``, which would leave
    the channels behind). ``channel_factory(target)`` makes each endpoint's channel
    (``grpc.insecure_channel`` by default; pass one for credentials or options). ``key`` gives a
    call's hash key for the hashing strategies. ``retries`` is how many other endpoints a call
    that failed with ``UNAVAILABLE`` may be retried on (unary requests only; see the README for
    the idempotency caveat). The balancer is not closed with the channel: it may outlive it.
    """

    def __init__(
        self,
        balancer: Balancer,
        *,
        channel_factory: Optional[ChannelFactory] = None,
        key: Optional[KeyFunction] = None,
        retries: int = 0,
    ) -> None:
        check_arguments(balancer, retries)
        self._balancer = balancer
        self._key = key
        self._retries = retries
        self._members = Members(balancer, channel_factory if channel_factory is not None else grpc.insecure_channel)
        self._connectivity = ConnectivityWatch(self._members)

    @property
    def balancer(self) -> Balancer:
        return self._balancer

    def update(self, endpoints: Iterable[Union[Endpoint, Invoker]]) -> None:
        """Replaces the endpoints (an ``Invoker`` alone dials its address). Ids that stay keep
        their channel (unless their target changed); the channels of ids that left close once
        the calls running on them have ended. A set the balancer rejects raises its error and
        changes nothing, channels included."""
        self._members.update(endpoints)

    @property
    def channels(self) -> Dict[int, Any]:
        """The current endpoints' grpc channels by invoker id (a copy)."""
        return {member.id: member.channel for member in self._members.snapshot()}

    def unary_unary(
        self,
        method: str,
        request_serializer: Optional[Callable[[Any], bytes]] = None,
        response_deserializer: Optional[Callable[[bytes], Any]] = None,
        _registered_method: Optional[bool] = False,
    ) -> UnaryUnary:
        return UnaryUnary(self, ("unary_unary", method, request_serializer, response_deserializer, bool(_registered_method)))

    def unary_stream(
        self,
        method: str,
        request_serializer: Optional[Callable[[Any], bytes]] = None,
        response_deserializer: Optional[Callable[[bytes], Any]] = None,
        _registered_method: Optional[bool] = False,
    ) -> UnaryStream:
        return UnaryStream(self, ("unary_stream", method, request_serializer, response_deserializer, bool(_registered_method)))

    def stream_unary(
        self,
        method: str,
        request_serializer: Optional[Callable[[Any], bytes]] = None,
        response_deserializer: Optional[Callable[[bytes], Any]] = None,
        _registered_method: Optional[bool] = False,
    ) -> StreamUnary:
        return StreamUnary(self, ("stream_unary", method, request_serializer, response_deserializer, bool(_registered_method)))

    def stream_stream(
        self,
        method: str,
        request_serializer: Optional[Callable[[Any], bytes]] = None,
        response_deserializer: Optional[Callable[[bytes], Any]] = None,
        _registered_method: Optional[bool] = False,
    ) -> StreamStream:
        return StreamStream(self, ("stream_stream", method, request_serializer, response_deserializer, bool(_registered_method)))

    def subscribe(self, callback: Callable[[Any], None], try_to_connect: Optional[bool] = False) -> None:
        """Connectivity of the endpoints together, as round_robin aggregates it: ``READY`` if
        any endpoint's channel is, else ``CONNECTING``, else ``IDLE``, else ``TRANSIENT_FAILURE``
        (also with no endpoints); ``SHUTDOWN`` once closed. ``grpc.channel_ready_future(channel)``
        therefore completes when some endpoint is ready."""
        self._connectivity.subscribe(callback, bool(try_to_connect))

    def unsubscribe(self, callback: Callable[[Any], None]) -> None:
        self._connectivity.unsubscribe(callback)

    def close(self) -> None:
        """Closes every endpoint's channel now, cancelling the calls running on them (as
        ``grpc.Channel.close`` does); later calls raise ``ValueError``. Idempotent."""
        self._members.close()

    def __enter__(self) -> "BalancedChannel":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<polylb.grpc.BalancedChannel endpoints={sorted(self.channels)} retries={self._retries}>"
