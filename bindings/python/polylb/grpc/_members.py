"""The balanced channel's endpoints: one grpc channel per invoker id, and when each may close."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

from .._balancer import Balancer
from .._invoker import Invoker

#: Makes the grpc channel of one endpoint from its target (grpc.insecure_channel by default).
ChannelFactory = Callable[[str], Any]

#: ``key(method, request, metadata)``: the hash key of one call (``None``: no key). ``request``
#: is ``None`` for client and bidi streams, whose requests are not known when the call picks.
KeyFunction = Callable[[str, Any, Any], Optional[Union[bytes, str]]]


@dataclass(frozen=True)
class Endpoint:
    """One provider: the polylb ``invoker`` that balancing sees, and the gRPC ``target`` its
    channel dials (``None``: the invoker's address, e.g. ``"10.0.0.1:50051"``)."""

    invoker: Invoker
    target: Optional[str] = None

    @property
    def dial_target(self) -> str:
        if self.target is not None:
            return self.target
        address = self.invoker.address
        return address.decode("utf-8") if isinstance(address, bytes) else address


class Member:
    """An endpoint's grpc channel and the calls running on it. A member that has left the set
    (``retiring``) closes its channel once its last call has ended: closing a grpc channel
    cancels every RPC still running on it."""

    __slots__ = ("id", "target", "channel", "in_flight", "retiring", "closed", "multicallables")

    def __init__(self, id: int, target: str, channel: Any) -> None:
        self.id = id
        self.target = target
        self.channel = channel
        self.in_flight = 0
        self.retiring = False
        self.closed = False
        # The grpc multicallables made on this channel, by what the caller asked for: making one
        # per call would repeat grpcio's method registration on every call.
        self.multicallables: Dict[Tuple[Any, ...], Any] = {}

    def multicallable(self, shape: Tuple[Any, ...]) -> Any:
        made = self.multicallables.get(shape)
        if made is None:
            kind, method, serializer, deserializer, registered = shape
            factory = getattr(self.channel, kind)
            if registered:
                made = factory(method, serializer, deserializer, _registered_method=True)
            else:
                # A channel made by a factory may predate `_registered_method` (a test double,
                # an interceptor's wrapper): not passing it keeps those working.
                made = factory(method, serializer, deserializer)
            self.multicallables[shape] = made
        return made


def _close_channel(channel: Any) -> None:
    channel.close()


def _close_elsewhere(channel: Any) -> None:
    """Closes ``channel`` on a thread of its own. grpcio runs a future's or stream's done
    callbacks on the thread that completes the channel's calls, and ``close()`` waits until
    that thread has completed them all, the ending call's other batches included (a bidi
    stream's status can arrive before them): closed from there, the channel would wait for
    itself forever, and so would the stream's reader."""
    try:
        threading.Thread(target=channel.close, name="polylb-close-drained-channel", daemon=True).start()
    except RuntimeError:
        pass  # the interpreter is shutting down: grpcio closes its channels itself


class Members:
    """The current members by id, kept in step with the balancer's invoker set.

    An update makes the channels of new ids before the balancer can pick them, and removes the
    ids that left only after the balancer stopped picking them; a call that picked an id from the
    old set and finds it gone (``acquire`` returns None) picks again, from the new set."""

    def __init__(
        self,
        balancer: Balancer,
        channel_factory: ChannelFactory,
        close_channel: Optional[Callable[[Any], None]] = None,
    ) -> None:
        self._balancer = balancer
        self._channel_factory = channel_factory
        # How a channel this bookkeeping retires is closed: grpc.Channel.close() by default (from
        # another thread when grpcio's own done callback asks, see _close_elsewhere); grpc.aio's
        # close() is a coroutine, so its channel passes one that schedules it on the loop.
        self._close_now: Callable[[Any], None] = close_channel or _close_channel
        self._close_from_callback: Callable[[Any], None] = close_channel or _close_elsewhere
        self._by_id: Dict[int, Member] = {}
        self._lock = threading.Lock()  # the members and their counts; held for a few lines only
        self._updating = threading.Lock()  # one update at a time; calls never wait for it
        self._draining: Set[Member] = set()  # left the set, still running calls
        self._closed = False
        self._listeners: List[Callable[[List[Member], List[Member]], None]] = []

    def add_listener(self, listener: Callable[[List[Member], List[Member]], None]) -> None:
        """``listener(joined, left)`` after each update (the connectivity watcher's hook)."""
        self._listeners.append(listener)

    def snapshot(self) -> List[Member]:
        with self._lock:
            return list(self._by_id.values())

    @property
    def closed(self) -> bool:
        return self._closed

    def update(self, endpoints: Iterable[Union[Endpoint, Invoker]]) -> None:
        wanted = [e if isinstance(e, Endpoint) else Endpoint(e) for e in endpoints]
        with self._updating:
            if self._closed:
                raise ValueError("the balanced channel is closed")
            with self._lock:
                current = dict(self._by_id)
            fresh: Dict[int, Member] = {}
            try:
                for endpoint in wanted:
                    id, target = endpoint.invoker.id, endpoint.dial_target
                    kept = current.get(id)
                    if (kept is None or kept.target != target) and id not in fresh:
                        fresh[id] = Member(id, target, self._channel_factory(target))
                new_ids = [id for id in fresh if id not in current]
                with self._lock:
                    for id in new_ids:
                        self._by_id[id] = fresh[id]
                try:
                    self._balancer.update([endpoint.invoker for endpoint in wanted])
                except BaseException:
                    with self._lock:
                        for id in new_ids:
                            del self._by_id[id]
                    raise
            except BaseException:
                for member in fresh.values():
                    self._close_now(member.channel)  # never used: no call could pick these ids
                raise
            staying = {endpoint.invoker.id for endpoint in wanted}
            to_close: List[Member] = []
            left: List[Member] = []
            with self._lock:
                for id, member in current.items():
                    replaced = id in fresh
                    if id in staying and not replaced:
                        continue
                    if replaced:
                        self._by_id[id] = fresh[id]
                    else:
                        del self._by_id[id]
                    left.append(member)
                    if self._retire(member):
                        to_close.append(member)
            for member in to_close:
                self._close_now(member.channel)
            joined = list(fresh.values())
            for listener in self._listeners:
                listener(joined, left)

    def _retire(self, member: Member) -> bool:
        """Marks a member that left; True when it must be closed now (nothing running on it).
        Called with the lock held."""
        member.retiring = True
        if member.in_flight == 0 and not member.closed:
            member.closed = True
            return True
        self._draining.add(member)
        return False

    def acquire(self, id: int) -> Optional[Member]:
        """The member of a picked id, counted as in use; None when the id has left the set."""
        with self._lock:
            member = self._by_id.get(id)
            if member is not None:
                member.in_flight += 1
            return member

    def release(self, member: Member, on_channel_thread: bool = False) -> None:
        """A call on ``member`` has ended; the last one on a member that left closes it.
        ``on_channel_thread``: called from grpcio's done callback, which runs on the channel's
        own thread; the channel is then closed from another thread (see _close_elsewhere)."""
        with self._lock:
            member.in_flight -= 1
            if not (member.retiring and member.in_flight == 0 and not member.closed):
                return
            member.closed = True
            self._draining.discard(member)
        if on_channel_thread:
            self._close_from_callback(member.channel)
        else:
            self._close_now(member.channel)

    def close(self) -> None:
        """Closes every channel at once, cancelling the calls running on them (as closing a
        grpc channel does); members already retiring close too."""
        with self._updating:
            members, draining = self._shut()
            for member in members + draining:
                member.channel.close()
            for listener in self._listeners:
                listener([], members)

    def shut(self) -> List[Any]:
        """Refuses calls and updates from now on and hands back every channel, drained ones
        included, for the caller to close (grpc.aio's ``close`` is awaited, with its grace)."""
        with self._updating:
            members, draining = self._shut()
        for listener in self._listeners:
            listener([], members)
        return [member.channel for member in members + draining]

    def _shut(self) -> Tuple[List[Member], List[Member]]:
        with self._lock:
            self._closed = True
            members = list(self._by_id.values())
            draining = list(self._draining)
            self._by_id.clear()
            self._draining.clear()
            for member in members + draining:
                member.retiring = True
                member.closed = True
        return members, draining
