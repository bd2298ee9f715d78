"""``polylb.grpc.aio.BalancedChannel`` against real in-process grpc.aio servers on 127.0.0.1.

Servers 1..3 answer with their id (bytes in, bytes out: no protoc) on ``/svc/Who`` (unary),
``/svc/Count`` (server stream: its id twice), ``/svc/Sum`` (client stream) and ``/svc/Chat``
(bidi: its id per request). The request (the first one of a stream) steers: ``b"SLOW"`` waits
until the test sets the server's ``release`` (a stream sends one message first),
``b"STATUS:NAME"`` aborts with that status; a server whose ``unavailable`` flag is set aborts
every call with UNAVAILABLE. Each test runs in an event loop of its own (grpc.aio binds to one).
Skipped without grpcio, as the other gRPC tests are.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Tuple

import pytest

from conftest import PYTHON_DIR, by_id
from polylb import Balancer, DuplicateIdError, Invoker, NegativeWeightError

grpc = pytest.importorskip(
    "grpc",
    reason="grpcio is not installed, so the balanced channel's tests cannot run "
    "(bindings/python/run-tests.sh installs it: pip install grpcio)",
)
import grpc.aio  # noqa: E402  (after the skip: grpc may be missing)

from polylb.grpc.aio import BalancedChannel, Endpoint, NoEndpointsError  # noqa: E402
from test_grpc_channel import PATIENCE_S, five_sigma  # noqa: E402

KINDS = ["unary_unary", "unary_stream", "stream_unary", "stream_stream"]
PATHS = {"unary_unary": "/svc/Who", "unary_stream": "/svc/Count", "stream_unary": "/svc/Sum", "stream_stream": "/svc/Chat"}


@dataclass
class Server:
    id: int
    address: str = ""
    unavailable: bool = False
    started: asyncio.Event = field(default_factory=asyncio.Event)  # a SLOW call arrived
    release: asyncio.Event = field(default_factory=asyncio.Event)  # let SLOW calls end


async def _steer(server: Server, request: bytes, context: Any) -> None:
    if request == b"SLOW":
        server.started.set()
        await server.release.wait()
    elif request.startswith(b"STATUS:"):
        await context.abort(grpc.StatusCode[request[7:].decode()], "asked for it")


async def _serve(server: Server) -> Any:
    me = str(server.id).encode()

    async def refuse_if_draining(context: Any) -> None:
        if server.unavailable:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"server {server.id} is draining")

    async def who(request: bytes, context: Any) -> bytes:
        await refuse_if_draining(context)
        await _steer(server, request, context)
        return me

    async def count(request: bytes, context: Any) -> AsyncIterator[bytes]:
        await refuse_if_draining(context)
        yield me
        await _steer(server, request, context)
        yield me

    async def total(requests: AsyncIterator[bytes], context: Any) -> bytes:
        await refuse_if_draining(context)
        async for request in requests:
            await _steer(server, request, context)
        return me

    async def chat(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        await refuse_if_draining(context)
        async for request in requests:
            yield me
            await _steer(server, request, context)

    handlers = grpc.method_handlers_generic_handler(
        "svc",
        {
            "Who": grpc.unary_unary_rpc_method_handler(who),
            "Count": grpc.unary_stream_rpc_method_handler(count),
            "Sum": grpc.stream_unary_rpc_method_handler(total),
            "Chat": grpc.stream_stream_rpc_method_handler(chat),
        },
    )
    grpc_server = grpc.aio.server()
    grpc_server.add_generic_rpc_handlers((handlers,))
    server.address = f"127.0.0.1:{grpc_server.add_insecure_port('127.0.0.1:0')}"
    await grpc_server.start()
    return grpc_server


Scenario = Callable[[Dict[int, Server]], Awaitable[None]]


def run(scenario: Scenario, servers: int = 3) -> None:
    """Runs ``scenario(servers)`` in a fresh event loop with servers 1..``servers`` started."""

    async def main() -> None:
        running = {i: Server(i) for i in range(1, servers + 1)}
        started = [await _serve(server) for server in running.values()]
        try:
            await asyncio.wait_for(scenario(running), PATIENCE_S * 3)  # a hang fails, not hangs
        finally:
            for server in running.values():
                server.release.set()
            for grpc_server in started:
                await grpc_server.stop(0)

    asyncio.run(main())


def endpoints(servers: Dict[int, Server], ids: List[int], weights: Optional[Dict[int, int]] = None) -> List[Endpoint]:
    return [
        Endpoint(Invoker(i, f"server-{i}", weight=(weights or {}).get(i, 100)), target=servers[i].address) for i in ids
    ]


async def opened(balancer: Balancer, servers: Dict[int, Server], ids: List[int], **options: Any) -> BalancedChannel:
    channel = BalancedChannel(balancer, **options)
    channel.update(endpoints(servers, ids))
    await asyncio.wait_for(channel.channel_ready(), PATIENCE_S)
    return channel


def start(channel: BalancedChannel, kind: str, request: bytes, timeout: float = PATIENCE_S) -> Any:
    multicallable = getattr(channel, kind)(PATHS[kind])
    if kind.startswith("stream"):
        return multicallable(iter([request]), timeout=timeout)
    return multicallable(request, timeout=timeout)


async def finish(call: Any) -> Any:
    """The call's answer: its response, or a response stream's messages."""
    if isinstance(call, (grpc.aio.UnaryStreamCall, grpc.aio.StreamStreamCall)):
        return [message async for message in call]
    return await call


def counts(balancer: Balancer) -> Dict[int, Tuple[int, int, int, int, int]]:
    """(active, selected, succeeded, failures, timeouts) by id."""
    return {
        i: (row["active"], row["selected"], row["succeeded"], row["failures"], row["timeouts"])
        for i, row in by_id(balancer.stats()).items()
    }


class Recorder:
    """A channel factory recording the grpc.aio channels it made and when each was closed."""

    def __init__(self) -> None:
        self.made: List[Any] = []
        self.closed: List[Any] = []

    def __call__(self, target: str) -> Any:
        channel = grpc.aio.insecure_channel(target)
        close = channel.close

        async def recorded_close(grace: Optional[float] = None) -> None:
            self.closed.append(channel)
            await close(grace)

        channel.close = recorded_close
        self.made.append(channel)
        return channel

    def open_channels(self) -> List[Any]:
        return [c for c in self.made if not any(c is d for d in self.closed)]


async def settle() -> None:
    """Lets the loop run the callbacks and close tasks a call's end scheduled."""
    for _ in range(5):
        await asyncio.sleep(0.01)


# -- balancing -----------------------------------------------------------------------------


def test_calls_follow_the_weights(balancer_factory: Any) -> None:
    draws = 900
    answered: Counter[int] = Counter()

    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("random", config={"seed": 7})
        async with BalancedChannel(lb) as channel:
            channel.update(endpoints(servers, [1, 2, 3], weights={1: 100, 2: 200, 3: 300}))
            who = channel.unary_unary("/svc/Who")
            for _ in range(draws // 50):
                answers = await asyncio.gather(*(who(b"hi", timeout=PATIENCE_S) for _ in range(50)))
                answered.update(int(answer) for answer in answers)
            # Every answer came from the server the balancer picked: its counts are the servers'.
            assert {i: row[2] for i, row in counts(lb).items()} == dict(answered)

    run(scenario)
    for server_id, share in {1: 1 / 6, 2: 2 / 6, 3: 3 / 6}.items():
        assert abs(answered[server_id] - draws * share) <= five_sigma(draws, share), answered


# -- one outcome per call, of the right kind -----------------------------------------------

#: What a call adds to (active, selected, succeeded, failures, timeouts).
SUCCESS, FAILURE, TIMEOUT, CANCEL = (0, 1, 1, 0, 0), (0, 1, 0, 1, 0), (0, 1, 0, 1, 1), (0, 1, 0, 0, 0)


async def _ending(channel: BalancedChannel, servers: Dict[int, Server], kind: str, how: str) -> None:
    """Makes one call of ``kind`` end ``how``; checks what the caller sees."""
    if how == "answered":
        assert await finish(start(channel, kind, b"hi")) in (b"1", [b"1", b"1"], [b"1"])
    elif how in ("provider error", "provider cancelled", "service error"):
        status = {"provider error": "INTERNAL", "provider cancelled": "CANCELLED", "service error": "NOT_FOUND"}[how]
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await finish(start(channel, kind, b"STATUS:" + status.encode()))
        assert raised.value.code() == grpc.StatusCode[status]  # grpc.aio's error, unchanged
    elif how == "deadline":
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await finish(start(channel, kind, b"SLOW", timeout=0.3))
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    elif how == "own cancel":
        call = start(channel, kind, b"SLOW")
        await asyncio.wait_for(servers[1].started.wait(), PATIENCE_S)
        assert call.cancel() and call.cancelled()
        with pytest.raises(asyncio.CancelledError):
            await finish(call)
    elif how == "task cancelled":
        task = asyncio.ensure_future(finish(start(channel, kind, b"SLOW")))
        await asyncio.wait_for(servers[1].started.wait(), PATIENCE_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:  # pragma: no cover
        raise AssertionError(how)


ENDINGS = {
    "answered": SUCCESS,
    "service error": SUCCESS,  # NOT_FOUND: the provider answered
    "provider error": FAILURE,
    "provider cancelled": FAILURE,  # its CANCELLED, not this side's
    "deadline": TIMEOUT,
    "own cancel": CANCEL,
    "task cancelled": CANCEL,
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_call_reports_one_outcome_of_the_right_kind(balancer_factory: Any, kind: str) -> None:
    seen: Dict[str, Tuple[int, ...]] = {}

    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        async with await opened(lb, servers, [1]) as channel:
            for how in ENDINGS:
                servers[1].started.clear()
                before = counts(lb)[1]
                await _ending(channel, servers, kind, how)
                await settle()
                seen[how] = tuple(after - was for after, was in zip(counts(lb)[1], before))

    run(scenario, servers=1)
    assert seen == ENDINGS


@pytest.mark.parametrize("kind", ["unary_unary", "unary_stream"])
def test_unavailable_is_retried_on_another_server(balancer_factory: Any, kind: str) -> None:
    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        async with await opened(lb, servers, [1, 2], retries=1) as channel:
            servers[1].unavailable = True
            answers = [await finish(start(channel, kind, b"hi")) for _ in range(20)]
            assert all(answer in (b"2", [b"2", b"2"]) for answer in answers), answers
            await settle()
            row1, row2 = counts(lb)[1], counts(lb)[2]
            assert row1[0] == 0 and row1[3] == row1[1] == 10  # each attempt there: a failure
            assert row2 == (0, 20, 20, 0, 0)

    run(scenario, servers=2)


@pytest.mark.parametrize("kind", KINDS)
def test_without_retries_unavailable_reaches_the_caller(balancer_factory: Any, kind: str) -> None:
    # Client and bidi streams are never retried, whatever `retries` says.
    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        retries = 3 if kind.startswith("stream") else 0
        async with await opened(lb, servers, [1, 2], retries=retries) as channel:
            servers[1].unavailable = True
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await finish(start(channel, kind, b"hi"))
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            await settle()
            assert counts(lb) == {1: FAILURE, 2: (0, 0, 0, 0, 0)}

    run(scenario, servers=2)


@pytest.mark.parametrize("kind", ["unary_unary", "unary_stream"])
def test_a_call_awaited_after_close_keeps_its_error_instead_of_retrying(balancer_factory: Any, kind: str) -> None:
    # Its first attempt failed with UNAVAILABLE before close(); awaiting it afterwards must not
    # try another endpoint of the closed channel, nor raise the channel's internal ValueError
    # (grpc.aio's calls raise AioRpcError or CancelledError): the attempt's error stands.
    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        channel = await opened(lb, servers, [1, 2], retries=1)
        servers[1].unavailable = True
        call = start(channel, kind, b"hi")
        assert await call.code() == grpc.StatusCode.UNAVAILABLE
        await channel.close()
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await finish(call)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        await settle()
        assert counts(lb) == {1: FAILURE, 2: (0, 0, 0, 0, 0)}

    run(scenario, servers=2)


def test_a_deadline_is_not_retried(balancer_factory: Any) -> None:
    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        async with await opened(lb, servers, [1, 2], retries=3) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await channel.unary_unary("/svc/Who")(b"SLOW", timeout=0.3)
            assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            await settle()
            assert counts(lb) == {1: TIMEOUT, 2: (0, 0, 0, 0, 0)}

    run(scenario, servers=2)


def test_a_dropped_stream_is_cancelled_and_reported_so(balancer_factory: Any) -> None:
    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        async with await opened(lb, servers, [1]) as channel:
            stream = channel.unary_stream("/svc/Count")(b"SLOW", timeout=PATIENCE_S)
            assert await stream.read() == b"1"
            assert counts(lb)[1][0] == 1
            del stream  # dropped mid-stream: cancelled at once
            await settle()
            assert counts(lb)[1] == CANCEL

    run(scenario, servers=1)


@pytest.mark.parametrize("kind", ["unary_unary", "unary_stream", "stream_unary"])
def test_a_call_grpc_aio_could_not_start_is_not_left_in_flight(balancer_factory: Any, kind: str) -> None:
    # Metadata grpc.aio cannot encode (a value neither str nor bytes) makes awaiting or reading
    # the call raise TypeError, and grpc.aio never ends that call: no status, no done callback.
    # Nothing was sent: a cancel, and the call must not stay counted on its endpoint for good
    # (nor keep the channel of an endpoint that left from closing).
    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        made = Recorder()
        async with await opened(lb, servers, [1], channel_factory=made) as channel:
            multicallable = getattr(channel, kind)(PATHS[kind])
            bad = [("x-count", 1)]
            if kind == "stream_unary":
                call = multicallable(iter([b"hi"]), timeout=PATIENCE_S, metadata=bad)
            else:
                call = multicallable(b"hi", timeout=PATIENCE_S, metadata=bad)
            with pytest.raises(TypeError):
                await finish(call)
            await settle()
            assert counts(lb)[1] == CANCEL
            channel.update(endpoints(servers, [2]))
            await settle()
            assert made.open_channels() == made.made[1:]  # endpoint 1's channel closed

    run(scenario, servers=2)


# -- membership ------------------------------------------------------------------------------


def test_update_drains_leaving_channels_while_calls_run(balancer_factory: Any) -> None:
    async def scenario(servers: Dict[int, Server]) -> None:
        recorder = Recorder()
        lb = balancer_factory("roundrobin")
        async with await opened(lb, servers, [1, 2], channel_factory=recorder) as channel:
            before = channel.channels
            kinds = ["unary_unary", "unary_stream", "stream_unary", "stream_stream"]
            # roundrobin alternates 1, 2: the SLOW calls on server 1 stay in flight.
            slow = [start(channel, kind, b"SLOW") for kind in kinds for _ in (1, 2)]
            await asyncio.wait_for(servers[1].started.wait(), PATIENCE_S)
            tasks = [asyncio.ensure_future(finish(call)) for call in slow]
            await settle()
            assert counts(lb)[1][0] == counts(lb)[2][0] == 4  # in flight until they end
            channel.update(endpoints(servers, [2, 3]))
            assert set(channel.channels) == {2, 3} and channel.channels[2] is before[2]
            # Churn while server 1's calls run: ids come and go, server 1 never comes back.
            for ids in ([3], [2, 3], [2], [2, 3]):
                channel.update(endpoints(servers, ids))
                assert await channel.unary_unary("/svc/Who")(b"hi", timeout=PATIENCE_S) in (b"2", b"3")
                await settle()
                assert not any(c is before[1] for c in recorder.closed)  # its calls still run
            servers[1].release.set()
            servers[2].release.set()
            results = await asyncio.gather(*tasks)
            assert all(result in (b"1", b"2", [b"1", b"1"], [b"2", b"2"], [b"1"], [b"2"]) for result in results)
            await settle()
            assert any(c is before[1] for c in recorder.closed)  # closed once they had ended
            assert all(row[0] == 0 for row in counts(lb).values())
            assert set(recorder.open_channels()) == set(channel.channels.values())
        await settle()
        assert recorder.open_channels() == []

    run(scenario)


@pytest.mark.parametrize(
    "bad, error",
    [
        ([Invoker(1, "server-1"), Invoker(1, "server-1b")], DuplicateIdError),
        ([Invoker(4, "server-4", weight=-1)], NegativeWeightError),
    ],
    ids=["duplicate id", "negative weight"],
)
def test_a_rejected_update_changes_nothing(balancer_factory: Any, bad: List[Invoker], error: type) -> None:
    async def scenario(servers: Dict[int, Server]) -> None:
        recorder = Recorder()
        lb = balancer_factory("roundrobin")
        async with await opened(lb, servers, [1, 2], channel_factory=recorder) as channel:
            before, stats_before = channel.channels, lb.stats()
            with pytest.raises(error):
                channel.update(endpoints(servers, [2]) + [Endpoint(i, target=servers[3].address) for i in bad])
            await settle()
            assert channel.channels == before
            assert lb.stats() == stats_before
            assert set(recorder.open_channels()) == set(before.values())  # those made for it: closed
            who = channel.unary_unary("/svc/Who")
            assert sorted([await who(b"hi", timeout=PATIENCE_S) for _ in range(4)]) == [b"1", b"1", b"2", b"2"]

    run(scenario)


# -- closing and the rest of grpc.aio.Channel ------------------------------------------------


def test_close_cancels_running_calls_and_refuses_new_ones(balancer_factory: Any) -> None:
    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        channel = await opened(lb, servers, [1])
        slow = channel.unary_unary("/svc/Who")(b"SLOW", timeout=PATIENCE_S)
        await asyncio.wait_for(servers[1].started.wait(), PATIENCE_S)
        await channel.close()
        with pytest.raises(asyncio.CancelledError):  # as grpc.aio's close() ends its calls
            await slow
        await settle()
        assert counts(lb)[1] == CANCEL  # this side's close: no verdict on the provider
        for kind in KINDS:
            with pytest.raises(grpc.aio.UsageError, match="closed"):
                start(channel, kind, b"hi")
        with pytest.raises(ValueError, match="closed"):
            channel.update(endpoints(servers, [1]))
        assert channel.get_state() == grpc.ChannelConnectivity.SHUTDOWN
        with pytest.raises(grpc.aio.UsageError):
            await channel.channel_ready()
        await channel.close()  # idempotent

    run(scenario, servers=1)


def test_no_endpoints_is_unavailable(balancer_factory: Any) -> None:
    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        async with BalancedChannel(lb) as channel:
            assert channel.get_state() == grpc.ChannelConnectivity.TRANSIENT_FAILURE
            for kind in KINDS:
                call = start(channel, kind, b"hi")
                assert call.done() and await call.code() == grpc.StatusCode.UNAVAILABLE
                with pytest.raises(NoEndpointsError) as raised:
                    await finish(call)
                assert isinstance(raised.value, grpc.aio.AioRpcError)
                assert "no endpoints" in raised.value.details()
            # An update wakes a waiter; then some endpoint gets ready.
            waiter = asyncio.ensure_future(channel.wait_for_state_change(grpc.ChannelConnectivity.TRANSIENT_FAILURE))
            await asyncio.sleep(0.05)
            assert not waiter.done()
            channel.update(endpoints(servers, [1]))
            await asyncio.wait_for(waiter, PATIENCE_S)
            await asyncio.wait_for(channel.channel_ready(), PATIENCE_S)
            assert channel.get_state() == grpc.ChannelConnectivity.READY
        assert lb.stats()["invokers"][0]["selected"] == 0  # nothing was picked before the update

    run(scenario, servers=1)


class GreeterStub:
    """The shape of grpcio-tools' generated asyncio stub: it passes _registered_method=True."""

    def __init__(self, channel: Any) -> None:
        options = dict(request_serializer=str.encode, response_deserializer=bytes.decode, _registered_method=True)
        self.Who = channel.unary_unary("/svc/Who", **options)
        self.Count = channel.unary_stream("/svc/Count", **options)
        self.Sum = channel.stream_unary("/svc/Sum", **options)
        self.Chat = channel.stream_stream("/svc/Chat", **options)


def test_a_generated_stub_works_unchanged(balancer_factory: Any) -> None:
    async def scenario(servers: Dict[int, Server]) -> None:
        lb = balancer_factory("roundrobin")
        async with await opened(lb, servers, [2]) as channel:
            assert isinstance(channel, grpc.aio.Channel)
            stub = GreeterStub(channel)
            call = stub.Who("hi", timeout=PATIENCE_S)
            assert isinstance(call, grpc.aio.UnaryUnaryCall)
            assert await call == "2"
            assert await call.code() == grpc.StatusCode.OK and call.done() and not call.cancelled()
            assert await call.initial_metadata() is not None and await call.trailing_metadata() is not None
            ended: List[Any] = []
            stream = stub.Count("x", timeout=PATIENCE_S)
            stream.add_done_callback(ended.append)
            assert [message async for message in stream] == ["2", "2"]
            await settle()
            assert ended == [stream]
            total = stub.Sum(timeout=PATIENCE_S)  # reader/writer style
            await total.write("a")
            await total.done_writing()
            assert await total == "2"
            chat = stub.Chat(timeout=PATIENCE_S)
            await chat.write("a")
            assert await chat.read() == "2"
            await chat.done_writing()
            assert await chat.read() is grpc.aio.EOF
            assert await chat.code() == grpc.StatusCode.OK
            await settle()
            assert counts(lb)[2] == (0, 4, 4, 0, 0)

    run(scenario)


ANSWERS = [b"1", b"2", b"3"] + [[i] * n for i in (b"1", b"2", b"3") for n in (1, 2)]


def test_many_concurrent_tasks(balancer_factory: Any) -> None:
    async def scenario(servers: Dict[int, Server]) -> None:
        recorder = Recorder()
        lb = balancer_factory("leastactive", config={"seed": 11})
        async with await opened(lb, servers, [1, 2, 3], channel_factory=recorder) as channel:

            async def caller(n: int) -> Any:
                return await finish(start(channel, KINDS[n % 4], b"hi"))

            async def churn() -> None:
                for ids in ([1, 2], [2, 3], [1, 3], [1, 2, 3]):
                    await asyncio.sleep(0.01)
                    channel.update(endpoints(servers, ids))

            answers = await asyncio.gather(*(caller(n) for n in range(400)))
            await settle()
            rows = counts(lb)
            assert all(row[0] == 0 for row in rows.values())
            assert sum(row[1] for row in rows.values()) == sum(row[2] for row in rows.values()) == 400
            assert Counter(str(answer) for answer in answers).keys() <= {str(a) for a in ANSWERS}
            # Again while the endpoints change (a left id's statistics go with it).
            results = await asyncio.gather(*(caller(n) for n in range(400)), churn())
            assert all(result in ANSWERS for result in results[:400])
            await settle()
            assert all(row[0] == 0 for row in counts(lb).values())
            assert set(recorder.open_channels()) == set(channel.channels.values())

    run(scenario)


def test_readme_example_runs() -> None:
    readme = (PYTHON_DIR / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## With grpc\.aio: `polylb\.grpc\.aio\.BalancedChannel`\n(.*?)(?=^## )", readme, flags=re.M | re.S)
    assert section, "README has no polylb.grpc.aio section"
    blocks = re.findall(r"```python\n(.*?)```", section.group(1), flags=re.S)
    assert len(blocks) == 1 and "BalancedChannel(" in blocks[0]
    exec(compile(blocks[0], "README.md:grpc-aio", "exec"), {"__name__": "readme"})


class _ReadyAfterTwoLooks:
    """A stand-in grpc.aio channel that turns READY just after its state was read twice: what
    a real channel does when its connection completes between two reads."""

    def __init__(self) -> None:
        self.looks = 0
        self.state = grpc.ChannelConnectivity.CONNECTING

    def get_state(self, try_to_connect: bool = False) -> Any:
        seen = self.state
        self.looks += 1
        if self.looks == 2:
            self.state = grpc.ChannelConnectivity.READY
        return seen

    async def wait_for_state_change(self, last_observed_state: Any) -> None:
        while self.state == last_observed_state:  # a change of state that never comes
            await asyncio.sleep(3600)

    async def close(self, grace: Optional[float] = None) -> None:
        pass


def test_a_state_change_between_two_reads_is_not_waited_past(balancer_factory: Any) -> None:
    # The balanced channel read each endpoint's state twice, once for the aggregate and once
    # for the watch: a change between the two (CONNECTING, then READY) was taken for no change
    # by the first read and waited past by the second, so channel_ready() hung.
    async def main() -> None:
        endpoint = _ReadyAfterTwoLooks()
        channel = BalancedChannel(balancer_factory("random"), channel_factory=lambda target: endpoint)
        channel.update([Endpoint(Invoker(1, "server-1"), target="stand-in")])
        await asyncio.wait_for(channel.channel_ready(), 5)
        assert channel.get_state() == grpc.ChannelConnectivity.READY
        await channel.close()

    asyncio.run(main())
