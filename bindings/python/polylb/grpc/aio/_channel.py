""":class:`BalancedChannel`: a ``grpc.aio.Channel`` over one grpc.aio channel per endpoint,
balanced by polylb."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Iterable, List, Optional, Set, Type, Union

import grpc  # type: ignore[import-untyped, unused-ignore]
import grpc.aio  # type: ignore[import-untyped, unused-ignore]

from ..._balancer import Balancer
from ..._invoker import Invoker
from .._balanced import Balanced
from .._connectivity import _aggregate
from .._errors import CLOSED
from .._members import ChannelFactory, Endpoint, KeyFunction, Member
from ._calls import StreamStream, StreamUnary, UnaryStream, UnaryUnary


class BalancedChannel(Balanced[UnaryUnary, UnaryStream, StreamUnary, StreamStream], grpc.aio.Channel):  # type: ignore[misc, unused-ignore]
    """A ``grpc.aio.Channel`` that sends each call to an endpoint ``balancer`` picks, on that
    endpoint's own grpc.aio channel, and reports how the call ended to the balancer.

    As :class:`polylb.grpc.BalancedChannel`, with ``channel_factory`` defaulting to
    ``grpc.aio.insecure_channel``. Use it from the event loop its calls run on (grpc.aio's
    channels belong to one loop). The balancer is not closed with the channel.
    """

    def __init__(
        self,
        balancer: Balancer,
        *,
        channel_factory: Optional[ChannelFactory] = None,
        key: Optional[KeyFunction] = None,
        retries: int = 0,
    ) -> None:
        self._closing: Set["asyncio.Task[None]"] = set()
        self._membership_waiters: List["asyncio.Future[None]"] = []
        factory = channel_factory if channel_factory is not None else grpc.aio.insecure_channel
        kinds = (UnaryUnary, UnaryStream, StreamUnary, StreamStream)
        Balanced.__init__(self, balancer, factory, self._close_later, key, retries, kinds)
        self._members.add_listener(self._membership_changed)

    def update(self, endpoints: Iterable[Union[Endpoint, Invoker]]) -> None:
        """As :meth:`polylb.grpc.BalancedChannel.update`; the channel of an id that left is
        closed (grpc.aio's ``close()``, on the running loop) once its calls have ended."""
        self._members.update(endpoints)

    def _close_later(self, channel: Any) -> None:
        """Closes a drained channel without waiting for it: its close() is a coroutine, and the
        bookkeeping that drains it runs in update() and in grpc.aio's done callbacks."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop runs (update() outside it): grpc.aio closes a dropped channel itself
        task = loop.create_task(channel.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _membership_changed(self, joined: List[Member], left: List[Member]) -> None:
        waiters, self._membership_waiters = self._membership_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def get_state(self, try_to_connect: bool = False) -> Any:
        """The endpoints' states together, as the sync channel's ``subscribe`` gives them:
        ``READY`` if any endpoint is, else ``CONNECTING``, else ``IDLE``, else
        ``TRANSIENT_FAILURE`` (also with no endpoints); ``SHUTDOWN`` once closed."""
        states = [member.channel.get_state(try_to_connect) for member in self._members.snapshot()]
        return _aggregate(states, self._members.closed)

    async def wait_for_state_change(self, last_observed_state: Any) -> None:
        """Returns once ``get_state()`` differs from ``last_observed_state``: it waits for any
        endpoint's channel to change, or for an update or close to change the endpoints."""
        loop = asyncio.get_running_loop()
        while True:
            # Each endpoint's state is read once, for the aggregate and for its watch: read
            # twice, a change between the two reads (CONNECTING, then READY) would be judged no
            # change by the first and waited past by the second, for good.
            members = self._members.snapshot()
            states = [member.channel.get_state() for member in members]
            if _aggregate(states, self._members.closed) != last_observed_state:
                return
            # Registered with no await since the snapshot: no update can fall in between.
            changed: "asyncio.Future[None]" = loop.create_future()
            self._membership_waiters.append(changed)
            watches = [
                loop.create_task(member.channel.wait_for_state_change(state))
                for member, state in zip(members, states)
            ]
            try:
                await asyncio.wait([changed, *watches], return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                if changed in self._membership_waiters:
                    self._membership_waiters.remove(changed)
                for watch in watches:
                    watch.cancel()
                    if watch.done() and not watch.cancelled():
                        watch.exception()  # a channel closed under its watch: only a wake-up

    async def channel_ready(self) -> None:
        """Returns once some endpoint's channel is ``READY`` (connecting them meanwhile)."""
        state = self.get_state(try_to_connect=True)
        while state != grpc.ChannelConnectivity.READY:
            if state == grpc.ChannelConnectivity.SHUTDOWN:
                raise grpc.aio.UsageError(CLOSED)
            await self.wait_for_state_change(state)
            state = self.get_state(try_to_connect=True)

    async def close(self, grace: Optional[float] = None) -> None:
        """Closes every endpoint's channel, as ``grpc.aio.Channel.close(grace)`` closes one:
        calls still running after ``grace`` seconds (at once with None) are cancelled, and
        reported as cancels; later calls raise ``grpc.aio.UsageError``. Idempotent."""
        channels = self._members.shut()
        await asyncio.gather(*(channel.close(grace) for channel in channels), *list(self._closing))

    async def __aenter__(self) -> "BalancedChannel":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<polylb.grpc.aio.BalancedChannel endpoints={sorted(self.channels)} retries={self._retries}>"
