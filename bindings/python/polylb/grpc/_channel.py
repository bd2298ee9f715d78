""":class:`BalancedChannel`: a ``grpc.Channel`` over one channel per endpoint, balanced by polylb."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Callable, Optional, Type

import grpc  # type: ignore[import-untyped, unused-ignore]

from .._balancer import Balancer
from ._calls import StreamStream, StreamUnary, UnaryStream, UnaryUnary
from ._balanced import Balanced
from ._connectivity import ConnectivityWatch
from ._members import ChannelFactory, KeyFunction


class BalancedChannel(Balanced[UnaryUnary, UnaryStream, StreamUnary, StreamStream], grpc.Channel):  # type: ignore[misc, unused-ignore]
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
        factory = channel_factory if channel_factory is not None else grpc.insecure_channel
        kinds = (UnaryUnary, UnaryStream, StreamUnary, StreamStream)
        Balanced.__init__(self, balancer, factory, None, key, retries, kinds)
        self._connectivity = ConnectivityWatch(self._members)

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
