"""What the sync and the asyncio balanced channels share: their members, the constructor's
checks and the four multicallable factories grpc's abstract channels require."""

from __future__ import annotations

from typing import Any, Callable, Dict, Generic, Iterable, Optional, Tuple, TypeVar, Union

from .._balancer import Balancer
from .._invoker import Invoker
from ._calls import Shape
from ._members import ChannelFactory, Endpoint, KeyFunction, Members

#: The multicallable classes of one kind of channel: unary-unary, unary-stream, stream-unary
#: and stream-stream.
UU = TypeVar("UU")
US = TypeVar("US")
SU = TypeVar("SU")
SS = TypeVar("SS")


class Balanced(Generic[UU, US, SU, SS]):
    """The endpoints of a balanced channel, kept in step with its balancer, and its
    multicallables (of the classes ``kinds`` names), each call balanced on its own."""

    def __init__(
        self,
        balancer: Balancer,
        channel_factory: ChannelFactory,
        close_channel: Optional[Callable[[Any], None]],
        key: Optional[KeyFunction],
        retries: int,
        kinds: Tuple[
            Callable[[Any, Shape], UU],
            Callable[[Any, Shape], US],
            Callable[[Any, Shape], SU],
            Callable[[Any, Shape], SS],
        ],
    ) -> None:
        if not isinstance(balancer, Balancer):
            raise TypeError(f"balancer must be a polylb.Balancer, not {type(balancer).__name__}")
        if retries.__class__ is not int or retries < 0:
            raise ValueError(f"retries must be an int >= 0, not {retries!r}")
        self._balancer = balancer
        self._key = key
        self._retries = retries
        self._kinds = kinds
        self._members = Members(balancer, channel_factory, close_channel)

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
        """The current endpoints' own channels by invoker id (a copy)."""
        return {member.id: member.channel for member in self._members.snapshot()}

    def unary_unary(
        self,
        method: str,
        request_serializer: Optional[Callable[[Any], bytes]] = None,
        response_deserializer: Optional[Callable[[bytes], Any]] = None,
        _registered_method: Optional[bool] = False,
    ) -> UU:
        shape: Shape = ("unary_unary", method, request_serializer, response_deserializer, bool(_registered_method))
        return self._kinds[0](self, shape)

    def unary_stream(
        self,
        method: str,
        request_serializer: Optional[Callable[[Any], bytes]] = None,
        response_deserializer: Optional[Callable[[bytes], Any]] = None,
        _registered_method: Optional[bool] = False,
    ) -> US:
        shape: Shape = ("unary_stream", method, request_serializer, response_deserializer, bool(_registered_method))
        return self._kinds[1](self, shape)

    def stream_unary(
        self,
        method: str,
        request_serializer: Optional[Callable[[Any], bytes]] = None,
        response_deserializer: Optional[Callable[[bytes], Any]] = None,
        _registered_method: Optional[bool] = False,
    ) -> SU:
        shape: Shape = ("stream_unary", method, request_serializer, response_deserializer, bool(_registered_method))
        return self._kinds[2](self, shape)

    def stream_stream(
        self,
        method: str,
        request_serializer: Optional[Callable[[Any], bytes]] = None,
        response_deserializer: Optional[Callable[[bytes], Any]] = None,
        _registered_method: Optional[bool] = False,
    ) -> SS:
        shape: Shape = ("stream_stream", method, request_serializer, response_deserializer, bool(_registered_method))
        return self._kinds[3](self, shape)
