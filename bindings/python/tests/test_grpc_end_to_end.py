"""``with lb.call():`` around real grpcio calls: each ending is the outcome docs/outcomes.md gives.

An in-process server on 127.0.0.1 answers ``/svc/Method`` (bytes in, bytes out: no protoc) with
the status the request names, e.g. ``b"NOT_FOUND"`` aborts with NOT_FOUND, ``b"OK"`` answers and
``b"SLOW"`` outlives the client's deadline. Skipped when grpcio is not installed
(bindings/python/run-tests.sh installs it); the binding itself never imports grpc.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from concurrent import futures
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest

from conftest import by_id
from polylb import Balancer, Invoker, Outcome

grpc = pytest.importorskip(
    "grpc",
    reason="grpcio is not installed, so the gRPC end-to-end tests cannot run "
    "(bindings/python/run-tests.sh installs it: pip install grpcio)",
)
import grpc.aio  # noqa: E402  (after the skip: grpc may be missing)

METHOD = "/svc/Method"
#: Long enough for a loaded CI machine to connect and answer; the deadline case waits for it.
DEADLINE_S = 0.5
#: What a call through the balancer adds to (active, succeeded, failures, timeouts).
COUNTS = {
    Outcome.SUCCESS: (0, 1, 0, 0),
    Outcome.FAILURE: (0, 0, 1, 0),
    Outcome.TIMEOUT: (0, 0, 1, 1),
    Outcome.CANCELLED: (0, 0, 0, 0),
}

#: (request, method path, expected status of the raised RpcError or None for an answer, outcome).
CASES: List[Tuple[bytes, str, Optional[str], Outcome]] = [
    (b"OK", METHOD, None, Outcome.SUCCESS),
    # The provider answered with an error of the service's own: a healthy provider.
    (b"NOT_FOUND", METHOD, "NOT_FOUND", Outcome.SUCCESS),
    (b"INVALID_ARGUMENT", METHOD, "INVALID_ARGUMENT", Outcome.SUCCESS),
    (b"PERMISSION_DENIED", METHOD, "PERMISSION_DENIED", Outcome.SUCCESS),
    # The provider could not serve.
    (b"UNAVAILABLE", METHOD, "UNAVAILABLE", Outcome.FAILURE),
    (b"INTERNAL", METHOD, "INTERNAL", Outcome.FAILURE),
    (b"RESOURCE_EXHAUSTED", METHOD, "RESOURCE_EXHAUSTED", Outcome.FAILURE),
    (b"OK", "/svc/Missing", "UNIMPLEMENTED", Outcome.FAILURE),  # no such method deployed
    # The provider's own CANCELLED (its handler aborted so): this side cancelled nothing.
    (b"CANCELLED", METHOD, "CANCELLED", Outcome.FAILURE),
    # The client's deadline passed before the answer.
    (b"SLOW", METHOD, "DEADLINE_EXCEEDED", Outcome.TIMEOUT),
]
CASE_IDS = [f"{path.rsplit('/', 1)[1]}:{request.decode()}" for request, path, _, _ in CASES]


def counted(lb: Balancer) -> Tuple[int, int, int, int]:
    row = by_id(lb.stats())[1]
    return row["active"], row["succeeded"], row["failures"], row["timeouts"]


def _single(balancer_factory: Any) -> Balancer:
    lb: Balancer = balancer_factory("roundrobin")
    lb.update([Invoker(1, "127.0.0.1")])
    return lb


# -- the sync API ---------------------------------------------------------------------------


def _handle(request: bytes, context: Any) -> bytes:
    what = request.decode()
    if what == "OK":
        return b"answer"
    if what == "SLOW":
        give_up = time.monotonic() + 10
        while context.is_active() and time.monotonic() < give_up:
            time.sleep(0.01)
        return b"too late"
    context.abort(grpc.StatusCode[what], f"asked for {what}")
    raise AssertionError("abort() returned")  # pragma: no cover


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(
        "svc", {"Method": grpc.unary_unary_rpc_method_handler(_handle)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.fixture(scope="module")
def channel(address: str) -> Iterator[Any]:
    with grpc.insecure_channel(address) as opened:
        grpc.channel_ready_future(opened).result(timeout=10)  # connected before any deadline runs
        yield opened


@pytest.mark.parametrize("request_, path, status, outcome", CASES, ids=CASE_IDS)
def test_sync_stub(
    balancer_factory: Any, channel: Any, request_: bytes, path: str, status: Optional[str], outcome: Outcome
) -> None:
    lb = _single(balancer_factory)
    rpc: Callable[..., bytes] = channel.unary_unary(path)
    timeout = DEADLINE_S if request_ == b"SLOW" else 10
    if status is None:
        with lb.call():
            assert rpc(request_, timeout=timeout) == b"answer"
    else:
        with pytest.raises(grpc.RpcError) as raised:
            with lb.call():
                rpc(request_, timeout=timeout)
        assert raised.value.code() == grpc.StatusCode[status]  # what grpcio raised, unchanged
    assert counted(lb) == COUNTS[outcome]


def test_sync_stub_with_no_server_is_a_failure(balancer_factory: Any) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lb = _single(balancer_factory)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as closed:
        with pytest.raises(grpc.RpcError) as raised:
            with lb.call():
                closed.unary_unary(METHOD)(b"OK", timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert counted(lb) == COUNTS[Outcome.FAILURE]


def test_an_answer_over_this_sides_receive_limit_is_a_success(balancer_factory: Any, address: str) -> None:
    """The provider answered; grpcio refused the answer (RESOURCE_EXHAUSTED, "Received message
    larger than max"): another provider would answer the same, so no failure counts against it.
    A request over this side's send limit never left: a cancel."""
    lb = _single(balancer_factory)
    # The second call, a cancel, leaves the counts as the first left them.
    for option in ("grpc.max_receive_message_length", "grpc.max_send_message_length"):
        with grpc.insecure_channel(address, options=[(option, 1)]) as limited:
            with pytest.raises(grpc.RpcError) as raised:
                with lb.call():
                    limited.unary_unary(METHOD)(b"OK", timeout=10)
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, option
        assert counted(lb) == COUNTS[Outcome.SUCCESS], option


def test_a_request_this_side_cannot_encode_is_a_cancel(balancer_factory: Any, channel: Any) -> None:
    """grpcio ends a call whose request its serializer refused with INTERNAL ("Exception
    serializing request!"): nothing was sent, so the provider's counts do not move (a cancel,
    docs/outcomes.md), raised out of the block or read from a stream's status."""

    def refuse(request: Any) -> bytes:
        raise ValueError("not encodable")

    lb = _single(balancer_factory)
    unary = channel.unary_unary(METHOD, request_serializer=refuse)
    with pytest.raises(grpc.RpcError) as raised:
        with lb.call():
            unary(b"OK", timeout=10)
    assert raised.value.code() == grpc.StatusCode.INTERNAL
    # A request stream: grpcio ends the call with that status when it comes to encode it.
    with lb.call() as call:
        bidi = channel.stream_stream(METHOD, request_serializer=refuse)
        stream = call.stream(bidi(iter([b"OK"]), timeout=10))
        with pytest.raises(grpc.RpcError) as raised:
            list(stream)
    assert raised.value.code() == grpc.StatusCode.INTERNAL
    assert counted(lb) == COUNTS[Outcome.CANCELLED]
    assert by_id(lb.stats())[1]["selected"] == 2


def test_sync_future_cancelled_by_this_side_is_a_cancel(balancer_factory: Any, channel: Any) -> None:
    lb = _single(balancer_factory)
    with pytest.raises(grpc.FutureCancelledError):
        with lb.call():
            future = channel.unary_unary(METHOD).future(b"SLOW", timeout=10)
            assert future.cancel()
            future.result()
    assert counted(lb) == COUNTS[Outcome.CANCELLED]


def test_sync_future_whose_wait_runs_out_is_a_timeout(balancer_factory: Any, channel: Any) -> None:
    lb = _single(balancer_factory)
    future = None
    try:
        with pytest.raises(grpc.FutureTimeoutError):
            with lb.call():
                future = channel.unary_unary(METHOD).future(b"SLOW", timeout=10)
                future.result(timeout=DEADLINE_S)
    finally:
        if future is not None:
            future.cancel()
    assert counted(lb) == COUNTS[Outcome.TIMEOUT]


def test_sync_call_cut_by_closing_its_channel_is_a_cancel(balancer_factory: Any, address: str) -> None:
    """This side's channel.close() ends every call on it with CANCELLED ("Channel closed!"),
    though cancelled() stays False: the provider did nothing, so no failure counts against it
    (grpc.aio's close() cancels its calls, which raise asyncio.CancelledError: a cancel too)."""
    lb = _single(balancer_factory)
    closing = grpc.insecure_channel(address)
    grpc.channel_ready_future(closing).result(timeout=10)
    timer = threading.Timer(DEADLINE_S / 2, closing.close)
    timer.start()
    try:
        with pytest.raises(grpc.RpcError) as raised:
            with lb.call():
                closing.unary_unary(METHOD)(b"SLOW", timeout=10)
    finally:
        timer.join()
        closing.close()
    assert raised.value.code() == grpc.StatusCode.CANCELLED
    assert counted(lb) == COUNTS[Outcome.CANCELLED]


# -- the asyncio API ------------------------------------------------------------------------


async def _handle_async(request: bytes, context: Any) -> bytes:
    what = request.decode()
    if what == "OK":
        return b"answer"
    if what == "SLOW":
        await asyncio.sleep(10)  # the call's end or the server's stop cancels this
        return b"too late"
    await context.abort(grpc.StatusCode[what], f"asked for {what}")
    raise AssertionError("abort() returned")  # pragma: no cover


def test_asyncio_stub(balancer_factory: Any) -> None:
    """Every case of the sync test through grpc.aio (one event loop for all: grpc.aio binds to
    it), plus the caller's own cancel of the call, which is asyncio.CancelledError."""
    results: List[Tuple[str, Tuple[int, int, int, int], Tuple[int, int, int, int]]] = []

    async def main() -> None:
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "svc", {"Method": grpc.unary_unary_rpc_method_handler(_handle_async)}
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await asyncio.wait_for(channel.channel_ready(), 10)
                for (request_, path, status, outcome), case in zip(CASES, CASE_IDS):
                    lb = _single(balancer_factory)
                    rpc = channel.unary_unary(path)
                    timeout = DEADLINE_S if request_ == b"SLOW" else 10
                    if status is None:
                        async with lb.call():
                            assert await rpc(request_, timeout=timeout) == b"answer"
                    else:
                        with pytest.raises(grpc.aio.AioRpcError) as raised:
                            async with lb.call():
                                await rpc(request_, timeout=timeout)
                        assert raised.value.code() == grpc.StatusCode[status], case
                    results.append((case, counted(lb), COUNTS[outcome]))

                lb = _single(balancer_factory)
                with pytest.raises(asyncio.CancelledError):
                    async with lb.call():
                        call = channel.unary_unary(METHOD)(b"SLOW", timeout=10)
                        asyncio.get_running_loop().call_later(0.05, call.cancel)
                        await call
                results.append(("cancelled by the caller", counted(lb), COUNTS[Outcome.CANCELLED]))
        finally:
            await server.stop(0)

    asyncio.run(main())
    assert [(case, got) for case, got, _ in results] == [(case, want) for case, _, want in results]
