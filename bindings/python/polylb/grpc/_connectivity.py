"""``subscribe``/``unsubscribe``: one connectivity state for all the endpoints' channels."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

import grpc  # type: ignore[import-untyped, unused-ignore]

from ._members import Member, Members

Subscriber = Callable[[Any], None]


def _aggregate(states: List[Any], closed: bool) -> Any:
    """The balanced channel's state from its endpoints', as gRPC's round_robin aggregates its
    subchannels': READY if any is, else CONNECTING, else IDLE, else TRANSIENT_FAILURE (also
    with no endpoint: nothing can be sent). SHUTDOWN once closed."""
    Connectivity = grpc.ChannelConnectivity
    if closed:
        return Connectivity.SHUTDOWN
    for state in (Connectivity.READY, Connectivity.CONNECTING, Connectivity.IDLE):
        if state in states:
            return state
    return Connectivity.TRANSIENT_FAILURE


class ConnectivityWatch:
    """Subscribes to every member's channel while someone subscribes to the balanced channel,
    and tells each subscriber the aggregate state whenever it changes (and once on subscribing,
    as grpcio does), so ``grpc.channel_ready_future(balanced)`` means "some endpoint is READY"."""

    def __init__(self, members: Members) -> None:
        self._members = members
        self._lock = threading.Lock()
        self._subscribers: List[Subscriber] = []
        self._try_to_connect = False
        self._states: Dict[int, Any] = {}  # id(member) -> its last state
        self._watchers: Dict[int, Callable[[Any], None]] = {}
        self._watched: Dict[int, Member] = {}
        self._last: Optional[Any] = None
        members.add_listener(self._membership_changed)

    def subscribe(self, callback: Subscriber, try_to_connect: bool = False) -> None:
        with self._lock:
            self._subscribers.append(callback)
            self._try_to_connect = self._try_to_connect or bool(try_to_connect)
            try_now = self._try_to_connect
        for member in self._members.snapshot():
            self._watch(member, try_now)
        with self._lock:
            current = self._aggregate_locked()
            self._last = current
        callback(current)

    def unsubscribe(self, callback: Subscriber) -> None:
        with self._lock:
            if callback in self._subscribers:
                self._subscribers.remove(callback)
            if self._subscribers:
                return
            self._try_to_connect = False
            watched = list(self._watched.values())
            watchers = dict(self._watchers)
            self._watched.clear()
            self._watchers.clear()
            self._states.clear()
            self._last = None
        for member in watched:  # nobody listens: grpcio's polling threads may stop
            member.channel.unsubscribe(watchers[id(member)])

    def _watch(self, member: Member, try_to_connect: bool) -> None:
        with self._lock:
            if not self._subscribers or id(member) in self._watched or member.closed:
                return

            def watcher(state: Any, member_key: int = id(member)) -> None:
                self._member_changed(member_key, state)

            self._watched[id(member)] = member
            self._watchers[id(member)] = watcher
        member.channel.subscribe(watcher, try_to_connect=try_to_connect)

    def _member_changed(self, member_key: int, state: Any) -> None:
        with self._lock:
            if member_key not in self._watched:
                return  # left, or a late delivery after unsubscribe
            self._states[member_key] = state
        self._deliver()

    def _membership_changed(self, joined: List[Member], left: List[Member]) -> None:
        with self._lock:
            try_now = self._try_to_connect
            for member in left:
                self._watched.pop(id(member), None)
                self._watchers.pop(id(member), None)
                self._states.pop(id(member), None)
        for member in joined:
            self._watch(member, try_now)
        self._deliver()

    def _aggregate_locked(self) -> Any:
        states = [self._states.get(key, grpc.ChannelConnectivity.IDLE) for key in self._watched]
        return _aggregate(states, self._members.closed)

    def _deliver(self) -> None:
        with self._lock:
            if not self._subscribers:
                return
            current = self._aggregate_locked()
            if current == self._last:
                return
            self._last = current
            subscribers = list(self._subscribers)
        for subscriber in subscribers:  # outside the lock: a subscriber may unsubscribe
            subscriber(current)
