"""``polylb.grpc.BalancedChannel`` against real in-process grpcio servers on 127.0.0.1.

Four servers, ids 1..4, each answering with its own id (bytes in, bytes out: no protoc):
``/svc/Who`` (unary) answers ``b"<id>"``, or follows the request: ``b"SLOW"`` waits until
the test sets ``release`` (or the client gives up), ``b"STATUS:NAME"`` aborts with that status;
``/svc/Count`` (server stream) sends its id ``int(request)`` times, or forever with ``b"forever"``;
``/svc/Sum`` (client stream) and ``/svc/Chat`` (bidi) answer with the id. A server whose
``unavailable`` flag is set aborts every ``Who`` and ``Count`` with UNAVAILABLE. Skipped without grpcio.
"""

from __future__ import annotations

import math
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from conftest import PYTHON_DIR, by_id
from polylb import Balancer, DuplicateIdError, Invoker, NegativeWeightError

grpc = pytest.importorskip(
    "grpc",
    reason="grpcio is not installed, so the balanced channel's tests cannot run "
    "(bindings/python/run-tests.sh installs it: pip install grpcio)",
)
from polylb.grpc import BalancedChannel, Endpoint, NoEndpointsError  # noqa: E402

#: Long enough for a loaded machine to connect and answer; never a measured quantity.
PATIENCE_S = 20


@dataclass
class Server:
    id: int
    address: str
    unavailable: bool = False
    started: threading.Event = field(default_factory=threading.Event)  # a SLOW call arrived
    release: threading.Event = field(default_factory=threading.Event)  # let SLOW calls answer


def _serve(server: Server) -> Any:
    me = str(server.id).encode()

    def who(request: bytes, context: Any) -> bytes:
        if server.unavailable:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"server {server.id} is draining")
        if request == b"SLOW":
            server.started.set()
            while context.is_active() and not server.release.wait(0.01):
                pass
        elif request.startswith(b"STATUS:"):
            context.abort(grpc.StatusCode[request[7:].decode()], "asked for it")
        return me

    def count(request: bytes, context: Any) -> Iterator[bytes]:
        if server.unavailable:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"server {server.id} is draining")
        if request == b"forever":
            server.started.set()
            while context.is_active():
                yield me
                time.sleep(0.005)
            return
        for _ in range(int(request)):
            yield me

    def total(requests: Iterator[bytes], context: Any) -> bytes:
        for _ in requests:
            pass
        return me

    def chat(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        for _ in requests:
            yield me

    handlers = grpc.method_handlers_generic_handler(
        "svc",
        {
            "Who": grpc.unary_unary_rpc_method_handler(who),
            "Count": grpc.unary_stream_rpc_method_handler(count),
            "Sum": grpc.stream_unary_rpc_method_handler(total),
            "Chat": grpc.stream_stream_rpc_method_handler(chat),
        },
    )
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    grpc_server.add_generic_rpc_handlers((handlers,))
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    server.address = f"127.0.0.1:{port}"
    grpc_server.start()
    return grpc_server


@pytest.fixture(scope="module")
def running() -> Iterator[Dict[int, Server]]:
    servers = {i: Server(i, "") for i in (1, 2, 3, 4)}
    started = [_serve(server) for server in servers.values()]
    try:
        yield servers
    finally:
        for grpc_server in started:
            grpc_server.stop(None)


@pytest.fixture
def servers(running: Dict[int, Server]) -> Iterator[Dict[int, Server]]:
    for server in running.values():
        server.unavailable = False
        server.started.clear()
        server.release.clear()
    yield running
    for server in running.values():
        server.release.set()  # no SLOW handler outlives its test


class Recorder:
    """A channel factory that records the channels it made and which of them were closed."""

    def __init__(self) -> None:
        self.made: Dict[str, List[Any]] = {}
        self.closed: List[Any] = []

    def __call__(self, target: str) -> Any:
        channel = grpc.insecure_channel(target)
        close = channel.close

        def recorded_close() -> None:
            self.closed.append(channel)
            close()

        channel.close = recorded_close
        self.made.setdefault(target, []).append(channel)
        return channel

    def open_channels(self) -> List[Any]:
        return [c for made in self.made.values() for c in made if not any(c is d for d in self.closed)]


def endpoints(servers: Dict[int, Server], ids: List[int], weights: Optional[Dict[int, int]] = None) -> List[Endpoint]:
    # The invoker's address is a name (it places the invoker on a hash ring); the target dials.
    return [
        Endpoint(Invoker(i, f"server-{i}", weight=(weights or {}).get(i, 100)), target=servers[i].address)
        for i in ids
    ]


@pytest.fixture
def make(balancer_factory: Any, servers: Dict[int, Server]) -> Iterator[Callable[..., BalancedChannel]]:
    made: List[BalancedChannel] = []

    def build(loadbalance: str = "roundrobin", ids: List[int] = [1, 2, 3], *, config: Any = None, **options: Any) -> BalancedChannel:
        balancer = balancer_factory(loadbalance, config=config)
        channel = BalancedChannel(balancer, **options)
        channel.update(endpoints(servers, ids))
        grpc.channel_ready_future(channel).result(timeout=PATIENCE_S)
        made.append(channel)
        return channel

    yield build
    for channel in made:
        channel.close()


def who(channel: BalancedChannel) -> Callable[..., bytes]:
    rpc: Callable[..., bytes] = channel.unary_unary("/svc/Who")
    return rpc


def rows(channel: BalancedChannel) -> Dict[int, Dict[str, Any]]:
    return by_id(channel.balancer.stats())


def wait_until(condition: Callable[[], bool]) -> None:
    """Waits for something another thread does (grpcio reports a stream's end on its own
    thread); the limit only keeps a broken build from hanging, it is not what is tested."""
    give_up = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < give_up, "gave up waiting"
        time.sleep(0.005)


def five_sigma(draws: int, p: float) -> float:
    return 5 * math.sqrt(draws * p * (1 - p))


# -- balancing -----------------------------------------------------------------------------


def test_calls_follow_the_weights(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("random", config={"seed": 7})
    channel.update(endpoints(servers, [1, 2, 3], weights={1: 100, 2: 200, 3: 300}))
    draws = 1200
    answered = Counter(int(who(channel)(b"hi", timeout=PATIENCE_S)) for _ in range(draws))
    for server_id, share in {1: 1 / 6, 2: 2 / 6, 3: 3 / 6}.items():
        assert abs(answered[server_id] - draws * share) <= five_sigma(draws, share), answered
    # Every answer came from the server the balancer picked: its counts are the servers'.
    assert {i: row["succeeded"] for i, row in rows(channel).items()} == dict(answered)


def test_a_key_sticks_to_a_server_and_a_removal_moves_only_its_keys(
    make: Callable[..., BalancedChannel], servers: Dict[int, Server]
) -> None:
    channel = make("consistenthash", ids=[1, 2, 3, 4], key=lambda method, request, metadata: request)
    keys = [f"user-{n}".encode() for n in range(200)]
    first = {key: who(channel)(key, timeout=PATIENCE_S) for key in keys}
    assert len(set(first.values())) == 4  # 200 keys land on every server
    assert {key: who(channel)(key, timeout=PATIENCE_S) for key in keys} == first
    channel.update(endpoints(servers, [1, 3, 4]))
    after = {key: who(channel)(key, timeout=PATIENCE_S) for key in keys}
    moved = {key for key in keys if after[key] != first[key]}
    assert moved == {key for key in keys if first[key] == b"2"}
    assert b"2" not in after.values()


def test_a_key_from_metadata_steers_client_streams(make: Callable[..., BalancedChannel]) -> None:
    def from_metadata(method: str, request: Any, metadata: Any) -> Optional[bytes]:
        assert request is None  # a stream's requests are not known when it picks
        return dict(metadata or ())["user"].encode()

    channel = make("consistenthash", ids=[1, 2, 3, 4], key=from_metadata)
    total = channel.stream_unary("/svc/Sum")
    for user in ("ann", "bob", "cyd"):
        answers = {total(iter([b"x"]), metadata=[("user", user)], timeout=PATIENCE_S) for _ in range(5)}
        assert len(answers) == 1, user


# -- outcomes reach the balancer -------------------------------------------------------------


def test_statuses_are_read_as_outcomes(make: Callable[..., BalancedChannel]) -> None:
    channel = make("roundrobin", ids=[1])
    rpc = who(channel)
    assert rpc(b"hi", timeout=PATIENCE_S) == b"1"
    for status in ("NOT_FOUND", "UNAVAILABLE", "INTERNAL"):
        with pytest.raises(grpc.RpcError) as raised:
            rpc(b"STATUS:" + status.encode(), timeout=PATIENCE_S)
        assert raised.value.code() == grpc.StatusCode[status]  # grpcio's error, unchanged
    with pytest.raises(grpc.RpcError) as raised:
        rpc(b"SLOW", timeout=0.2)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    row = rows(channel)[1]
    # NOT_FOUND is the service's answer: a success; DEADLINE_EXCEEDED counts as a failure too.
    assert (row["active"], row["succeeded"], row["failures"], row["timeouts"]) == (0, 2, 3, 1)


def test_a_request_this_side_cannot_serialize_is_a_cancel(make: Callable[..., BalancedChannel]) -> None:
    # grpcio raises (or ends a request stream with) INTERNAL "Exception serializing request!":
    # the request was never sent whole, which says nothing about the provider (docs/outcomes.md).
    channel = make("roundrobin", ids=[1])

    def unencodable(_: Any) -> bytes:
        raise ValueError("cannot encode")

    unary = channel.unary_unary("/svc/Who", request_serializer=unencodable)
    with pytest.raises(grpc.RpcError) as raised:
        unary(b"hi", timeout=PATIENCE_S)
    assert raised.value.code() == grpc.StatusCode.INTERNAL  # grpcio's error, unchanged
    with pytest.raises(grpc.RpcError):
        unary.future(b"hi", timeout=PATIENCE_S).result()
    with pytest.raises(grpc.RpcError):
        channel.unary_stream("/svc/Count", request_serializer=unencodable)(b"1", timeout=PATIENCE_S)
    summed = channel.stream_unary("/svc/Sum", request_serializer=unencodable).future(iter([b"a"]), timeout=PATIENCE_S)
    with pytest.raises(grpc.RpcError):
        summed.result()
    wait_until(lambda: rows(channel)[1]["active"] == 0)
    row = rows(channel)[1]
    assert (row["succeeded"], row["failures"], row["timeouts"]) == (0, 0, 0), row


def test_with_call_and_futures_report_when_they_end(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("roundrobin", ids=[1])
    rpc = who(channel)
    response, call = rpc.with_call(b"hi", timeout=PATIENCE_S)
    assert response == b"1" and call.code() == grpc.StatusCode.OK
    assert rpc.future(b"hi", timeout=PATIENCE_S).result() == b"1"
    failed = rpc.future(b"STATUS:UNAVAILABLE", timeout=PATIENCE_S)
    assert failed.exception().code() == grpc.StatusCode.UNAVAILABLE
    slow = rpc.future(b"SLOW", timeout=PATIENCE_S)
    assert servers[1].started.wait(PATIENCE_S)
    assert rows(channel)[1]["active"] == 1  # in flight until it ends
    assert slow.cancel()
    wait_until(lambda: rows(channel)[1]["active"] == 0)
    row = rows(channel)[1]
    # The cancel is neither: only its in-flight count was undone.
    assert (row["selected"], row["succeeded"], row["failures"]) == (4, 2, 1)


def test_streams_report_their_end(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("roundrobin", ids=[1])
    count = channel.unary_stream("/svc/Count")
    assert list(count(b"3", timeout=PATIENCE_S)) == [b"1"] * 3
    chat = channel.stream_stream("/svc/Chat")
    assert list(chat(iter([b"a", b"b"]), timeout=PATIENCE_S)) == [b"1", b"1"]
    total = channel.stream_unary("/svc/Sum")
    assert total(iter([b"a"]), timeout=PATIENCE_S) == b"1"
    assert total.future(iter([b"a"]), timeout=PATIENCE_S).result() == b"1"
    wait_until(lambda: rows(channel)[1]["active"] == 0)
    assert rows(channel)[1]["succeeded"] == 4

    # A stream cancelled by this side, and one abandoned mid-stream: both cancels.
    cancelled = count(b"forever", timeout=PATIENCE_S)
    assert next(cancelled) == b"1"
    assert cancelled.cancel()
    abandoned = count(b"forever", timeout=PATIENCE_S)
    assert next(abandoned) == b"1"
    assert rows(channel)[1]["active"] == 1
    del abandoned  # dropped unread: cancelled at once (no gc.collect() needed)
    wait_until(lambda: rows(channel)[1]["active"] == 0)
    row = rows(channel)[1]
    assert (row["selected"], row["succeeded"], row["failures"]) == (6, 4, 0)


def test_a_stream_that_fails_is_a_failure(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("roundrobin", ids=[1])
    with pytest.raises(grpc.RpcError) as raised:
        list(channel.unary_stream("/svc/Count")(b"not a number", timeout=PATIENCE_S))
    assert raised.value.code() == grpc.StatusCode.UNKNOWN  # the handler raised
    wait_until(lambda: rows(channel)[1]["active"] == 0)
    assert rows(channel)[1]["failures"] == 1


# -- failover --------------------------------------------------------------------------------


def test_unavailable_is_retried_on_another_server(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("roundrobin", ids=[1, 2], retries=1)
    servers[1].unavailable = True
    answers = Counter(who(channel)(b"hi", timeout=PATIENCE_S) for _ in range(40))
    assert answers == {b"2": 40}  # each call that met server 1 went on to server 2
    row1, row2 = rows(channel)[1], rows(channel)[2]
    assert row1["failures"] == row1["selected"] > 0
    assert row2["succeeded"] == 40 and row2["failures"] == 0
    # Streams too, while no message has arrived.
    for _ in range(10):
        assert list(channel.unary_stream("/svc/Count")(b"2", timeout=PATIENCE_S)) == [b"2", b"2"]


def test_without_retries_unavailable_reaches_the_caller(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("roundrobin", ids=[1, 2])
    servers[1].unavailable = servers[2].unavailable = True
    with pytest.raises(grpc.RpcError) as raised:
        who(channel)(b"hi", timeout=PATIENCE_S)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert sum(row["selected"] for row in rows(channel).values()) == 1


def test_retries_stop_when_every_server_was_tried(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("roundrobin", ids=[1, 2], retries=5)
    servers[1].unavailable = servers[2].unavailable = True
    with pytest.raises(grpc.RpcError) as raised:
        who(channel)(b"hi", timeout=PATIENCE_S)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert {i: row["failures"] for i, row in rows(channel).items()} == {1: 1, 2: 1}


def test_a_deadline_is_not_retried(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("roundrobin", ids=[1, 2], retries=3)
    with pytest.raises(grpc.RpcError) as raised:
        who(channel)(b"SLOW", timeout=0.2)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert sum(row["selected"] for row in rows(channel).values()) == 1
    assert sum(row["timeouts"] for row in rows(channel).values()) == 1


def test_a_failing_server_is_ejected(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make(
        "roundrobin",
        ids=[1, 2],
        config={"outlier.consecutiveFailures": 3, "outlier.baseEjectionMs": 600000, "outlier.maxEjectionPercent": 50},
    )
    servers[1].unavailable = True
    failures = 0
    for _ in range(20):
        try:
            who(channel)(b"hi", timeout=PATIENCE_S)
        except grpc.RpcError:
            failures += 1
    assert failures == 3  # then server 1 was ejected
    assert [who(channel)(b"hi", timeout=PATIENCE_S) for _ in range(20)] == [b"2"] * 20


def test_peakewma_avoids_a_failing_server(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("peakewma", ids=[1, 2, 3], config={"seed": 3})
    servers[1].unavailable = True
    for _ in range(30):
        try:
            who(channel)(b"hi", timeout=PATIENCE_S)
        except grpc.RpcError:
            pass
    before = rows(channel)[1]["selected"]
    for _ in range(200):
        try:
            who(channel)(b"hi", timeout=PATIENCE_S)
        except grpc.RpcError:
            pass
    # A fair share would be 200 / 3; the failure penalty keeps it far below.
    assert rows(channel)[1]["selected"] - before < 200 / 3 - five_sigma(200, 1 / 3)


# -- membership ------------------------------------------------------------------------------


def test_update_keeps_staying_channels_and_drains_leaving_ones(
    balancer_factory: Any, servers: Dict[int, Server]
) -> None:
    recorder = Recorder()
    with BalancedChannel(balancer_factory("roundrobin"), channel_factory=recorder) as channel:
        channel.update(endpoints(servers, [1, 2]))
        before = channel.channels
        result: List[Any] = []
        slow = threading.Thread(target=lambda: result.append(who(channel)(b"SLOW", timeout=PATIENCE_S)))
        slow.start()  # roundrobin's first pick: server 1
        assert servers[1].started.wait(PATIENCE_S)
        channel.update(endpoints(servers, [2, 3]))
        after = channel.channels
        assert after[2] is before[2]
        assert set(after) == {2, 3}
        assert recorder.closed == []  # server 1's call is still running on its channel
        assert who(channel)(b"hi", timeout=PATIENCE_S) in (b"2", b"3")
        servers[1].release.set()
        slow.join(PATIENCE_S)
        assert result == [b"1"]  # completed, not cancelled by the update
        assert recorder.closed == [before[1]]  # closed once it had ended
    assert recorder.open_channels() == []


def test_a_leaving_channel_with_nothing_running_closes_at_once(balancer_factory: Any, servers: Dict[int, Server]) -> None:
    recorder = Recorder()
    with BalancedChannel(balancer_factory("roundrobin"), channel_factory=recorder) as channel:
        channel.update(endpoints(servers, [1, 2]))
        first = channel.channels
        channel.update(endpoints(servers, [2]))
        assert recorder.closed == [first[1]]
        channel.update([Endpoint(Invoker(2, "server-2"), target=servers[3].address)])  # moved
        assert recorder.closed == [first[1], first[2]]
        assert who(channel)(b"hi", timeout=PATIENCE_S) == b"3"


def test_a_drained_channel_never_closes_on_its_own_calls_thread(balancer_factory: Any, servers: Dict[int, Server]) -> None:
    # grpcio ends a future or stream on its channel's own thread, and closing a channel waits
    # there for that channel's calls to finish: the last call on a drained channel, closing it
    # from that thread, waited for itself. A bidi stream (its status can arrive before its other
    # batches) then hung its caller forever, past its deadline, and the channel never closed.
    closed_on: List[int] = []
    recorder = Recorder()

    def factory(target: str) -> Any:
        channel = recorder(target)
        close = channel.close

        def close_recording_thread() -> None:
            closed_on.append(threading.get_ident())
            close()

        channel.close = close_recording_thread
        return channel

    with BalancedChannel(balancer_factory("roundrobin"), channel_factory=factory) as channel:
        # A future: its end is reported on the channel's own thread, where this callback runs too.
        channel.update(endpoints(servers, [1]))
        ended_on: List[int] = []
        slow = who(channel).future(b"SLOW", timeout=PATIENCE_S)
        slow.add_done_callback(lambda _: ended_on.append(threading.get_ident()))
        assert servers[1].started.wait(PATIENCE_S)
        first = channel.channels[1]
        channel.update(endpoints(servers, [2]))  # server 1's channel drains
        servers[1].release.set()
        assert slow.result(PATIENCE_S) == b"1"
        wait_until(lambda: any(c is first for c in recorder.closed))
        wait_until(lambda: bool(ended_on))
        assert closed_on[-1] != ended_on[0]
        # Bidi streams on an endpoint that leaves while they run: each returns, each channel closes.
        chat = channel.stream_stream("/svc/Chat")
        for round in range(20):
            ids = [1 + round % 2]
            channel.update(endpoints(servers, ids))
            leaving = channel.channels[ids[0]]
            answers: List[List[bytes]] = []
            stream = chat(iter([b"a", b"b"]), timeout=PATIENCE_S)
            channel.update(endpoints(servers, [3]))
            reader = threading.Thread(target=lambda: answers.append(list(stream)), daemon=True)
            reader.start()
            reader.join(PATIENCE_S)
            assert answers == [[str(ids[0]).encode()] * 2], f"round {round}: the stream never ended"
            wait_until(lambda: any(c is leaving for c in recorder.closed))
        assert all(row["active"] == 0 for row in rows(channel).values())
    assert recorder.open_channels() == []


@pytest.mark.parametrize(
    "bad, error",
    [
        ([Invoker(1, "server-1"), Invoker(1, "server-1b")], DuplicateIdError),
        ([Invoker(4, "server-4", weight=-1)], NegativeWeightError),
    ],
    ids=["duplicate id", "negative weight"],
)
def test_a_rejected_update_changes_nothing(
    balancer_factory: Any, servers: Dict[int, Server], bad: List[Invoker], error: type
) -> None:
    recorder = Recorder()
    with BalancedChannel(balancer_factory("roundrobin"), channel_factory=recorder) as channel:
        channel.update(endpoints(servers, [1, 2]))
        before = channel.channels
        stats_before = channel.balancer.stats()
        with pytest.raises(error):
            channel.update(endpoints(servers, [2]) + [Endpoint(i, target=servers[4].address) for i in bad])
        assert channel.channels == before
        assert channel.balancer.stats() == stats_before
        assert set(recorder.open_channels()) == set(before.values())  # those made for it: closed
        assert sorted(who(channel)(b"hi", timeout=PATIENCE_S) for _ in range(4)) == [b"1", b"1", b"2", b"2"]


def test_a_plain_invoker_dials_its_address(balancer_factory: Any, servers: Dict[int, Server]) -> None:
    with BalancedChannel(balancer_factory("roundrobin")) as channel:
        channel.update([Invoker(7, servers[4].address)])
        assert who(channel)(b"hi", timeout=PATIENCE_S) == b"4"


def test_calls_while_another_thread_updates(make: Callable[..., BalancedChannel], servers: Dict[int, Server], balancer_factory: Any) -> None:
    recorder = Recorder()
    channel = BalancedChannel(balancer_factory("leastactive", config={"seed": 11}), channel_factory=recorder)
    channel.update(endpoints(servers, [1, 2, 3]))
    errors: List[BaseException] = []
    answers: List[bytes] = []
    stop = threading.Event()

    def caller() -> None:
        try:
            while not stop.is_set():
                answers.append(who(channel)(b"hi", timeout=PATIENCE_S))
        except BaseException as error:  # pragma: no cover - shown by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for thread in threads:
        thread.start()
    sets = ([1, 2, 3], [2, 3, 4], [1, 4], [3])
    for n in range(40):
        channel.update(endpoints(servers, sets[n % len(sets)]))
        time.sleep(0.002)
    stop.set()
    for thread in threads:
        thread.join(PATIENCE_S)
    assert errors == []
    assert len(answers) > 40
    final = sets[39 % len(sets)]
    assert set(channel.channels) == set(final)
    assert all(row["active"] == 0 for row in rows(channel).values())
    # Every channel of a set that was left has closed; only the final set's are open.
    assert set(recorder.open_channels()) == set(channel.channels.values())
    channel.close()
    assert recorder.open_channels() == []


# -- the rest of grpc.Channel ----------------------------------------------------------------


class GreeterStub:
    """The shape of grpcio-tools' generated stub (1.6x+): it passes _registered_method=True."""

    def __init__(self, channel: Any) -> None:
        self.Who = channel.unary_unary(
            "/svc/Who", request_serializer=str.encode, response_deserializer=bytes.decode, _registered_method=True
        )
        self.Count = channel.unary_stream(
            "/svc/Count", request_serializer=str.encode, response_deserializer=bytes.decode, _registered_method=True
        )
        self.Sum = channel.stream_unary(
            "/svc/Sum", request_serializer=str.encode, response_deserializer=bytes.decode, _registered_method=True
        )
        self.Chat = channel.stream_stream(
            "/svc/Chat", request_serializer=str.encode, response_deserializer=bytes.decode, _registered_method=True
        )


def test_a_generated_stub_works_unchanged(make: Callable[..., BalancedChannel]) -> None:
    channel = make("roundrobin", ids=[2])
    stub = GreeterStub(channel)
    assert stub.Who("hi", timeout=PATIENCE_S) == "2"
    assert list(stub.Count("2", timeout=PATIENCE_S)) == ["2", "2"]
    assert stub.Sum(iter(["a", "b"]), timeout=PATIENCE_S) == "2"
    assert list(stub.Chat(iter(["a"]), timeout=PATIENCE_S)) == ["2"]
    assert isinstance(channel, grpc.Channel)


def test_no_endpoints_is_unavailable(balancer_factory: Any) -> None:
    with BalancedChannel(balancer_factory("roundrobin")) as channel:
        rpc = who(channel)
        with pytest.raises(grpc.RpcError) as raised:
            rpc(b"hi", timeout=1)
        assert isinstance(raised.value, NoEndpointsError)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "no endpoints" in raised.value.details()
        assert rpc.future(b"hi").exception().code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError):
            next(iter(channel.unary_stream("/svc/Count")(b"1")))
        states: List[Any] = []
        channel.subscribe(states.append)
        assert states == [grpc.ChannelConnectivity.TRANSIENT_FAILURE]
        channel.unsubscribe(states.append)


def test_closing_cancels_running_calls_and_refuses_new_ones(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    channel = make("roundrobin", ids=[1])
    slow = who(channel).future(b"SLOW", timeout=PATIENCE_S)
    assert servers[1].started.wait(PATIENCE_S)
    channel.close()
    assert slow.exception(PATIENCE_S).code() == grpc.StatusCode.CANCELLED
    wait_until(lambda: rows(channel)[1]["active"] == 0)
    assert rows(channel)[1]["failures"] == 0  # this side's close: a cancel
    with pytest.raises(ValueError):
        who(channel)(b"hi")


def test_a_close_between_pick_and_send_is_a_cancel(balancer_factory: Any, servers: Dict[int, Server]) -> None:
    # close() in another thread after a call picked its endpoint but before grpcio started it:
    # grpcio refuses the closed channel with a ValueError; nothing was sent, so it is a cancel,
    # not a failure of the provider (the balancer may outlive the channel and serve others).
    balanced: List[BalancedChannel] = []

    class ClosesFirst:
        """A channel whose calls find the balanced channel closed just before they start."""

        def __init__(self, target: str) -> None:
            self.channel = grpc.insecure_channel(target)

        def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
            rpc = self.channel.unary_unary(*args, **kwargs)

            class Racing:
                def __call__(self, *args: Any, **kwargs: Any) -> Any:
                    balanced[0].close()
                    return rpc(*args, **kwargs)

                def future(self, *args: Any, **kwargs: Any) -> Any:
                    balanced[0].close()
                    return rpc.future(*args, **kwargs)

            return Racing()

        def close(self) -> None:
            self.channel.close()

    for form in ("blocking", "future"):
        channel = BalancedChannel(balancer_factory("roundrobin"), channel_factory=ClosesFirst)
        balanced[:] = [channel]
        channel.update(endpoints(servers, [1]))
        rpc = who(channel)
        with pytest.raises(ValueError):
            rpc(b"hi", timeout=PATIENCE_S) if form == "blocking" else rpc.future(b"hi", timeout=PATIENCE_S)
        row = rows(channel)[1]
        assert (form, row["active"], row["failures"], row["succeeded"]) == (form, 0, 0, 0)


def test_an_answer_outlives_a_balancer_closed_during_its_call(make: Callable[..., BalancedChannel], servers: Dict[int, Server]) -> None:
    # The provider answered: the caller gets the answer, as a future's caller does, though the
    # report had nowhere to go.
    channel = make("roundrobin", ids=[1])
    rpc = who(channel)
    ended: Dict[str, Any] = {}

    def run() -> None:
        try:
            ended["answer"] = rpc(b"SLOW", timeout=PATIENCE_S)
        except BaseException as error:  # noqa: B036
            ended["error"] = error

    caller = threading.Thread(target=run)
    caller.start()
    assert servers[1].started.wait(PATIENCE_S)
    channel.balancer.close()
    servers[1].release.set()
    caller.join(PATIENCE_S)
    assert ended == {"answer": b"1"}


def test_polylb_imports_without_grpcio() -> None:
    script = (
        "import sys; sys.modules['grpc'] = None\n"
        "import polylb\n"
        "assert 'grpc' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "try:\n    import polylb.grpc\nexcept ImportError as error:\n    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=PYTHON_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install 'polylb[grpc]'" in done.stdout


def test_readme_example_runs() -> None:
    readme = (PYTHON_DIR / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## With grpcio: `polylb\.grpc\.BalancedChannel`\n(.*?)(?=^## )", readme, flags=re.M | re.S)
    assert section, "README has no BalancedChannel section"
    blocks = re.findall(r"```python\n(.*?)```", section.group(1), flags=re.S)
    assert len(blocks) == 1 and "BalancedChannel(" in blocks[0]
    exec(compile(blocks[0], "README.md:balanced-channel", "exec"), {"__name__": "readme"})
