"""``with lb.call():`` around real grpcio *streams* (server-streaming and bidi, sync and grpc.aio).

docs/outcomes.md, "Streams": a stream is one select and one report made when it ends; it is in
flight while open, a success's latency is its life, the status it ends with decides, and a
stream this side abandons is ``CANCELLED``. An in-process server on 127.0.0.1 (generic
handlers, bytes in and out: no protoc) plays a script of words, one per response: ``OK``
answers, ``SLOW`` answers after HOLD_S, ``HOLD`` answers once and then keeps the stream open
until the client ends it, and a status name (``UNAVAILABLE``, ``NOT_FOUND``...) ends the stream
with that status after the responses before it. The server stream gets the script as one
request (``b"OK,SLOW,OK"``), the bidi stream as one request per word. Skipped when grpcio is not
installed (bindings/python/run-tests.sh installs it); the binding itself never imports grpc.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from concurrent import futures
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator, List, Sequence, Tuple

import pytest

from conftest import by_id
from polylb import Balancer, Invoker, Outcome

grpc = pytest.importorskip(
    "grpc",
    reason="grpcio is not installed, so the gRPC stream tests cannot run "
    "(bindings/python/run-tests.sh installs it: pip install grpcio)",
)
import grpc.aio  # noqa: E402  (after the skip: grpc may be missing)

STREAM = "/svc/Stream"  # unary request, streamed responses
BIDI = "/svc/Bidi"  # streamed requests, streamed responses
KINDS = ["server-stream", "bidi"]
#: How long a SLOW word holds the stream open before its answer.
HOLD_S = 0.2
#: The client's deadline in the DEADLINE_EXCEEDED cases (the connection is made beforehand).
DEADLINE_S = 0.5
#: What a call through the balancer adds to (active, succeeded, failures, timeouts).
COUNTS = {
    Outcome.SUCCESS: (0, 1, 0, 0),
    Outcome.FAILURE: (0, 0, 1, 0),
    Outcome.TIMEOUT: (0, 0, 1, 1),
    Outcome.CANCELLED: (0, 0, 0, 0),
}
#: Scripts that end with an error status after two answers, the status, and its outcome.
ERRORS: List[Tuple[List[bytes], str, Outcome]] = [
    ([b"OK", b"OK", b"UNAVAILABLE"], "UNAVAILABLE", Outcome.FAILURE),  # the provider could not serve
    ([b"OK", b"OK", b"NOT_FOUND"], "NOT_FOUND", Outcome.SUCCESS),  # the service's own error
    # The provider ended the stream with CANCELLED (its handler's abort): this side cancelled
    # nothing, so the provider failed to serve (a grpc.aio stream's cancelled() says True all
    # the same: its details tell).
    ([b"OK", b"OK", b"CANCELLED"], "CANCELLED", Outcome.FAILURE),
]
ERROR_IDS = [status for _, status, _ in ERRORS]


def counted(lb: Balancer) -> Tuple[int, int, int, int]:
    row = by_id(lb.stats())[1]
    return row["active"], row["succeeded"], row["failures"], row["timeouts"]


def mean_success_s(lb: Balancer) -> float:
    return float(by_id(lb.stats())[1]["mean_success_us"]) / 1e6


def _single(balancer_factory: Any) -> Balancer:
    lb: Balancer = balancer_factory("roundrobin")
    lb.update([Invoker(1, "127.0.0.1")])
    return lb


# -- the sync API ---------------------------------------------------------------------------


def _play(words: Iterable[bytes], context: Any) -> Iterator[bytes]:
    for word in words:
        what = word.decode()
        if what == "SLOW":
            time.sleep(HOLD_S)
        elif what == "HOLD":
            yield b"held"
            give_up = time.monotonic() + 10
            while context.is_active() and time.monotonic() < give_up:
                time.sleep(0.01)
            return
        elif what != "OK":
            context.abort(grpc.StatusCode[what], f"asked for {what}")
        yield b"answer"


def _stream_handler(request: bytes, context: Any) -> Iterator[bytes]:
    return _play(request.split(b","), context)


def _bidi_handler(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
    return _play(requests, context)


def _serve(workers: int) -> Tuple[Any, int]:
    """A started server of the scripted streams on a loopback port: (server, port)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    handler = grpc.method_handlers_generic_handler(
        "svc",
        {
            "Stream": grpc.unary_stream_rpc_method_handler(_stream_handler),
            "Bidi": grpc.stream_stream_rpc_method_handler(_bidi_handler),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


@pytest.fixture(scope="module")
def channel() -> Iterator[Any]:
    server, port = _serve(8)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as opened:
            grpc.channel_ready_future(opened).result(timeout=10)  # connected before any deadline runs
            yield opened
    finally:
        server.stop(None)


def _open(channel: Any, kind: str, script: Sequence[bytes], timeout: float = 10) -> Any:
    """The stream's call object: an iterator of responses, a grpc.Call and grpc.Future."""
    if kind == "server-stream":
        return channel.unary_stream(STREAM)(b",".join(script), timeout=timeout)
    return channel.stream_stream(BIDI)(iter(script), timeout=timeout)


@pytest.mark.parametrize("kind", KINDS)
def test_sync_completed_stream_is_a_success_in_flight_for_its_life(
    balancer_factory: Any, channel: Any, kind: str
) -> None:
    lb = _single(balancer_factory)
    active_while_open = []
    with lb.call():
        for _ in _open(channel, kind, [b"OK", b"SLOW", b"OK"]):
            active_while_open.append(counted(lb)[0])
    assert active_while_open == [1, 1, 1]
    assert counted(lb) == COUNTS[Outcome.SUCCESS]
    assert mean_success_s(lb) >= HOLD_S  # the stream's life, not the time to open it


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("script, status, outcome", ERRORS, ids=ERROR_IDS)
def test_sync_stream_ended_by_an_error_status_mid_stream(
    balancer_factory: Any, channel: Any, kind: str, script: List[bytes], status: str, outcome: Outcome
) -> None:
    lb = _single(balancer_factory)
    received = []
    with pytest.raises(grpc.RpcError) as raised:
        with lb.call():
            for response in _open(channel, kind, script):
                received.append(response)
    assert received == [b"answer", b"answer"]  # the error came mid-stream
    assert raised.value.code() == grpc.StatusCode[status]  # what grpcio raised, unchanged
    assert counted(lb) == COUNTS[outcome]


@pytest.mark.parametrize("kind", KINDS)
def test_sync_stream_past_the_client_deadline_is_a_timeout(balancer_factory: Any, channel: Any, kind: str) -> None:
    lb = _single(balancer_factory)
    received = []
    with pytest.raises(grpc.RpcError) as raised:
        with lb.call():
            for response in _open(channel, kind, [b"OK", b"HOLD"], timeout=DEADLINE_S):
                received.append(response)
    assert received == [b"answer", b"held"]
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert counted(lb) == COUNTS[Outcome.TIMEOUT]


@pytest.mark.parametrize("kind", KINDS)
def test_sync_cancel_then_iterate_is_a_cancel(balancer_factory: Any, channel: Any, kind: str) -> None:
    """cancel() and go on iterating: grpcio raises the stream, with status CANCELLED."""
    lb = _single(balancer_factory)
    with pytest.raises(grpc.RpcError) as raised:
        with lb.call():
            responses = _open(channel, kind, [b"OK", b"HOLD"])
            for response in responses:
                if response == b"held":
                    assert counted(lb)[0] == 1
                    responses.cancel()
    assert raised.value.code() == grpc.StatusCode.CANCELLED
    assert counted(lb) == COUNTS[Outcome.CANCELLED]


@pytest.mark.parametrize("kind", KINDS)
def test_sync_stream_cancelled_then_left_is_reported_as_the_block_ended(
    balancer_factory: Any, channel: Any, kind: str
) -> None:
    """Without call.stream(), the binding cannot see a stream the block cancelled or left open:
    the block ended normally, so it is a success unless call.outcome says otherwise (the
    documented rule: set it to CANCELLED). Pinned so that README and behaviour agree."""
    lb = _single(balancer_factory)
    with lb.call():
        responses = _open(channel, kind, [b"OK", b"HOLD"])
        next(responses)
        responses.cancel()
    assert counted(lb) == COUNTS[Outcome.SUCCESS]

    lb = _single(balancer_factory)
    with lb.call() as call:
        responses = _open(channel, kind, [b"OK", b"HOLD"])
        next(responses)
        responses.cancel()
        call.outcome = Outcome.CANCELLED
    assert counted(lb) == COUNTS[Outcome.CANCELLED]


@pytest.mark.parametrize("kind", KINDS)
def test_sync_tracked_stream_cancelled_then_left_is_a_cancel(balancer_factory: Any, channel: Any, kind: str) -> None:
    lb = _single(balancer_factory)
    with lb.call() as call:
        responses = call.stream(_open(channel, kind, [b"OK", b"HOLD"]))
        assert next(responses) == b"answer"
        responses.cancel()
    assert counted(lb) == COUNTS[Outcome.CANCELLED]


@pytest.mark.parametrize("kind", KINDS)
def test_sync_tracked_stream_left_open_is_cancelled_and_a_cancel(
    balancer_factory: Any, channel: Any, kind: str
) -> None:
    """A `break` out of a stream that is still open: the block abandoned it. The binding ends it
    (cancel()), so it holds no place on the provider once it is no longer counted in flight."""
    lb = _single(balancer_factory)
    with lb.call() as call:
        responses = call.stream(_open(channel, kind, [b"OK", b"HOLD"]))
        for response in responses:
            if response == b"held":
                break
        assert not responses.done()
    assert responses.done() and responses.code() == grpc.StatusCode.CANCELLED
    assert counted(lb) == COUNTS[Outcome.CANCELLED]


@pytest.mark.parametrize("kind", KINDS)
def test_sync_tracked_stream_read_to_its_end_is_judged_by_its_status(
    balancer_factory: Any, channel: Any, kind: str
) -> None:
    """Tracked, the stream's own status decides even when the block caught its error."""
    lb = _single(balancer_factory)
    with lb.call() as call:
        for _ in call.stream(_open(channel, kind, [b"OK", b"SLOW", b"OK"])):
            pass
    assert counted(lb) == COUNTS[Outcome.SUCCESS]
    assert mean_success_s(lb) >= HOLD_S

    for script, status, outcome in ERRORS:
        lb = _single(balancer_factory)
        with lb.call() as call:
            try:
                for _ in call.stream(_open(channel, kind, script)):
                    pass
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode[status]
        assert counted(lb) == COUNTS[outcome], status


@pytest.mark.parametrize("tracked", [False, True], ids=["raised", "tracked"])
@pytest.mark.parametrize("kind", KINDS)
def test_sync_stream_cut_by_closing_its_channel_is_a_cancel(balancer_factory: Any, kind: str, tracked: bool) -> None:
    """This side's channel.close() ends its streams with CANCELLED ("Stream removed (Channel
    closed!)"), though cancelled() stays False: a cancel, whether the error propagates out of the
    block or the block catches it and call.stream() reads the status."""
    server, port = _serve(2)
    lb = _single(balancer_factory)
    closing = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(closing).result(timeout=10)
        expected: Any = contextlib.nullcontext() if tracked else pytest.raises(grpc.RpcError)
        with expected as raised:
            with lb.call() as call:
                responses = _open(closing, kind, [b"OK", b"HOLD"])
                if tracked:
                    call.stream(responses)
                try:
                    for response in responses:
                        if response == b"held":
                            closing.close()
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.CANCELLED
                    assert not error.cancelled()
                    if not tracked:
                        raise
        if raised is not None:
            assert raised.value.code() == grpc.StatusCode.CANCELLED
        assert counted(lb) == COUNTS[Outcome.CANCELLED]
    finally:
        closing.close()
        server.stop(None)


def test_sync_bidi_request_side_error_needs_call_outcome(balancer_factory: Any, channel: Any) -> None:
    """grpcio turns an exception in the request iterator into status UNKNOWN (a failure by the
    table, though the provider did nothing wrong); the documented fix sets call.outcome."""
    def requests(call: Any) -> Iterator[bytes]:
        try:
            yield b"OK"
            time.sleep(0.05)
            raise ValueError("the request side broke")
        except ValueError:
            if call is not None:
                call.outcome = Outcome.CANCELLED
            raise

    for call_outcome_set, outcome in ((False, Outcome.FAILURE), (True, Outcome.CANCELLED)):
        lb = _single(balancer_factory)
        with pytest.raises(grpc.RpcError) as raised:
            with lb.call() as call:
                for _ in channel.stream_stream(BIDI)(requests(call if call_outcome_set else None), timeout=10):
                    pass
        assert raised.value.code() == grpc.StatusCode.UNKNOWN
        assert counted(lb) == COUNTS[outcome], call_outcome_set


# -- the asyncio API ------------------------------------------------------------------------


async def _play_async(words: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for word in words:
        what = word.decode()
        if what == "SLOW":
            await asyncio.sleep(HOLD_S)
        elif what == "HOLD":
            yield b"held"
            await asyncio.sleep(10)  # the call's end or the server's stop cancels this
            return
        elif what != "OK":
            await context.abort(grpc.StatusCode[what], f"asked for {what}")
        yield b"answer"


async def _words(request: bytes) -> AsyncIterator[bytes]:
    for word in request.split(b","):
        yield word


# grpc.aio serves a stream from an async generator function (it checks), not one returned.
async def _stream_handler_async(request: bytes, context: Any) -> AsyncIterator[bytes]:
    async for response in _play_async(_words(request), context):
        yield response


async def _bidi_handler_async(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for response in _play_async(requests, context):
        yield response


def _run_async(test: Callable[[Any], Awaitable[None]]) -> None:
    """Runs test(channel) against a fresh grpc.aio server and channel, in a new event loop."""

    async def main() -> None:
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "svc",
            {
                "Stream": grpc.unary_stream_rpc_method_handler(_stream_handler_async),
                "Bidi": grpc.stream_stream_rpc_method_handler(_bidi_handler_async),
            },
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await asyncio.wait_for(channel.channel_ready(), 10)
                await test(channel)
        finally:
            await server.stop(0)

    asyncio.run(main())


def _open_async(channel: Any, kind: str, script: Sequence[bytes], timeout: float = 10) -> Any:
    if kind == "server-stream":
        return channel.unary_stream(STREAM)(b",".join(script), timeout=timeout)
    return channel.stream_stream(BIDI)(iter(script), timeout=timeout)


@pytest.mark.parametrize("kind", KINDS)
def test_asyncio_completed_stream_is_a_success_in_flight_for_its_life(balancer_factory: Any, kind: str) -> None:
    lb = _single(balancer_factory)
    active_while_open = []

    async def test(channel: Any) -> None:
        async with lb.call():
            async for _ in _open_async(channel, kind, [b"OK", b"SLOW", b"OK"]):
                active_while_open.append(counted(lb)[0])

    _run_async(test)
    assert active_while_open == [1, 1, 1]
    assert counted(lb) == COUNTS[Outcome.SUCCESS]
    assert mean_success_s(lb) >= HOLD_S


@pytest.mark.parametrize("kind", KINDS)
def test_asyncio_stream_ended_by_an_error_status_mid_stream(balancer_factory: Any, kind: str) -> None:
    """Each error script, and the client's deadline passing while the stream is held open."""
    results = []

    async def test(channel: Any) -> None:
        cases = [(script, status, outcome, 10.0) for script, status, outcome in ERRORS]
        cases.append(([b"OK", b"HOLD"], "DEADLINE_EXCEEDED", Outcome.TIMEOUT, DEADLINE_S))
        for script, status, outcome, timeout in cases:
            lb = _single(balancer_factory)
            received = []
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                async with lb.call():
                    async for response in _open_async(channel, kind, script, timeout):
                        received.append(response)
            assert len(received) == 2, status  # the error came mid-stream
            assert raised.value.code() == grpc.StatusCode[status]
            results.append((status, counted(lb), COUNTS[outcome]))

    _run_async(test)
    assert [(case, got) for case, got, _ in results] == [(case, want) for case, _, want in results]


@pytest.mark.parametrize("kind", KINDS)
def test_asyncio_cancel_by_the_caller_is_a_cancel(balancer_factory: Any, kind: str) -> None:
    """call.cancel() then iterating on, call.cancel() then leaving a tracked stream's block, a
    tracked stream left open by a `break`, and the caller's task cancelled mid-stream."""
    results = []

    async def test(channel: Any) -> None:
        lb = _single(balancer_factory)
        with pytest.raises(asyncio.CancelledError):  # what grpc.aio raises for this side's cancel
            async with lb.call():
                rpc = _open_async(channel, kind, [b"OK", b"HOLD"])
                async for response in rpc:
                    if response == b"held":
                        rpc.cancel()
        results.append(("cancel() then iterate", counted(lb)))

        lb = _single(balancer_factory)
        async with lb.call() as call:
            rpc = call.stream(_open_async(channel, kind, [b"OK", b"HOLD"]))
            assert await rpc.read() == b"answer"
            rpc.cancel()
        results.append(("tracked: cancel() then leave", counted(lb)))

        lb = _single(balancer_factory)
        async with lb.call() as call:
            rpc = call.stream(_open_async(channel, kind, [b"OK", b"HOLD"]))
            async for response in rpc:
                if response == b"held":
                    break
            assert not rpc.done()
        assert rpc.cancelled()
        results.append(("tracked: left open by break", counted(lb)))

        lb = _single(balancer_factory)
        holding = asyncio.Event()

        async def consume() -> None:
            async with lb.call():
                async for response in _open_async(channel, kind, [b"OK", b"HOLD"]):
                    if response == b"held":
                        holding.set()

        task = asyncio.ensure_future(consume())
        await asyncio.wait_for(holding.wait(), 10)
        assert counted(lb)[0] == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        results.append(("task cancelled", counted(lb)))

    _run_async(test)
    assert results == [
        ("cancel() then iterate", COUNTS[Outcome.CANCELLED]),
        ("tracked: cancel() then leave", COUNTS[Outcome.CANCELLED]),
        ("tracked: left open by break", COUNTS[Outcome.CANCELLED]),
        ("task cancelled", COUNTS[Outcome.CANCELLED]),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_asyncio_stream_cancelled_then_left_is_reported_as_the_block_ended(balancer_factory: Any, kind: str) -> None:
    """call.cancel() then leaving the block, which raised nothing: the binding cannot see the
    cancel, so it is the block's normal end unless call.outcome says CANCELLED."""
    results = []

    async def test(channel: Any) -> None:
        lb = _single(balancer_factory)
        async with lb.call():
            rpc = _open_async(channel, kind, [b"OK", b"HOLD"])
            await rpc.read()
            rpc.cancel()
        results.append(("cancel() then leave", counted(lb), COUNTS[Outcome.SUCCESS]))

        lb = _single(balancer_factory)
        async with lb.call() as call:
            rpc = _open_async(channel, kind, [b"OK", b"HOLD"])
            await rpc.read()
            rpc.cancel()
            call.outcome = Outcome.CANCELLED
        results.append(("cancel() then leave, call.outcome set", counted(lb), COUNTS[Outcome.CANCELLED]))

    _run_async(test)
    assert [(case, got) for case, got, _ in results] == [(case, want) for case, _, want in results]


@pytest.mark.parametrize("kind", KINDS)
def test_asyncio_tracked_stream_is_judged_by_its_status(balancer_factory: Any, kind: str) -> None:
    """Tracked and read to its end: OK a success (for the stream's life), an error status by the
    table even when the block caught it."""
    results = []

    async def test(channel: Any) -> None:
        lb = _single(balancer_factory)
        async with lb.call() as call:
            async for _ in call.stream(_open_async(channel, kind, [b"OK", b"SLOW", b"OK"])):
                pass
        assert mean_success_s(lb) >= HOLD_S
        results.append(("OK", counted(lb), COUNTS[Outcome.SUCCESS]))

        for script, status, outcome in ERRORS:
            lb = _single(balancer_factory)
            async with lb.call() as call:
                try:
                    async for _ in call.stream(_open_async(channel, kind, script)):
                        pass
                except grpc.aio.AioRpcError as error:
                    assert error.code() == grpc.StatusCode[status]
            results.append((f"{status} caught in the block", counted(lb), COUNTS[outcome]))

    _run_async(test)
    assert [(case, got) for case, got, _ in results] == [(case, want) for case, _, want in results]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is new in Python 3.11")
def test_asyncio_stream_read_in_a_task_group_is_judged_by_its_status(balancer_factory: Any) -> None:
    """A bidi stream's reader in a task of an asyncio.TaskGroup: its deadline reaches the block in
    an ExceptionGroup, and is still a timeout (its NOT_FOUND still a success)."""
    results = []

    async def test(channel: Any) -> None:
        cases = [([b"OK", b"HOLD"], DEADLINE_S, Outcome.TIMEOUT), ([b"OK", b"NOT_FOUND"], 10.0, Outcome.SUCCESS)]
        for script, timeout, outcome in cases:
            lb = _single(balancer_factory)
            with pytest.raises(BaseExceptionGroup):  # noqa: F821 (a builtin from 3.11)
                async with lb.call() as call:
                    stream = call.stream(_open_async(channel, "bidi", script, timeout=timeout))

                    async def reader() -> None:
                        async for _ in stream:
                            pass

                    async with asyncio.TaskGroup() as group:  # type: ignore[attr-defined]
                        group.create_task(reader())
            results.append((outcome.name, counted(lb), COUNTS[outcome]))

    _run_async(test)
    assert [(case, got) for case, got, _ in results] == [(case, want) for case, _, want in results]
