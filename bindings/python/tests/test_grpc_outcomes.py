"""How ``Call`` reads an error raised by grpcio (docs/outcomes.md), without grpc installed.

The binding never imports grpc: it recognises grpcio's exceptions by the module of a class in
their MRO (``grpc`` or ``grpc.*``) and reads the status name from their ``code()``. These
stand-ins carry exactly that shape; test_grpc_end_to_end.py checks the same against real grpcio.
"""

from __future__ import annotations

import enum
import sys
from typing import Any, Dict, Tuple

import pytest

from conftest import by_id
from polylb import Balancer, Invoker, Outcome


class StatusCode(enum.Enum):
    """The shape of grpc.StatusCode: members named after the gRPC codes, (int, text) values."""

    OK = (0, "ok")
    CANCELLED = (1, "cancelled")
    UNKNOWN = (2, "unknown")
    INVALID_ARGUMENT = (3, "invalid argument")
    DEADLINE_EXCEEDED = (4, "deadline exceeded")
    NOT_FOUND = (5, "not found")
    ALREADY_EXISTS = (6, "already exists")
    PERMISSION_DENIED = (7, "permission denied")
    RESOURCE_EXHAUSTED = (8, "resource exhausted")
    FAILED_PRECONDITION = (9, "failed precondition")
    ABORTED = (10, "aborted")
    OUT_OF_RANGE = (11, "out of range")
    UNIMPLEMENTED = (12, "unimplemented")
    INTERNAL = (13, "internal")
    UNAVAILABLE = (14, "unavailable")
    DATA_LOSS = (15, "data loss")
    UNAUTHENTICATED = (16, "unauthenticated")


#: docs/outcomes.md, "Choosing": the verdict on the provider for each status an RPC raised with.
#: OK is no error status: an exception carrying it is not read, and today's rule applies.
#: CANCELLED is the provider's here (this side cancelled nothing): a cancel only after your own
#: cancel (test_cancelled_is_a_cancel_only_when_this_side_cancelled).
EXPECTED: Dict[str, Outcome] = {
    "OK": Outcome.FAILURE,
    "CANCELLED": Outcome.FAILURE,
    "UNKNOWN": Outcome.FAILURE,
    "INVALID_ARGUMENT": Outcome.SUCCESS,
    "DEADLINE_EXCEEDED": Outcome.TIMEOUT,
    "NOT_FOUND": Outcome.SUCCESS,
    "ALREADY_EXISTS": Outcome.SUCCESS,
    "PERMISSION_DENIED": Outcome.SUCCESS,
    "RESOURCE_EXHAUSTED": Outcome.FAILURE,
    "FAILED_PRECONDITION": Outcome.SUCCESS,
    "ABORTED": Outcome.SUCCESS,
    "OUT_OF_RANGE": Outcome.SUCCESS,
    "UNIMPLEMENTED": Outcome.FAILURE,
    "INTERNAL": Outcome.FAILURE,
    "UNAVAILABLE": Outcome.FAILURE,
    "DATA_LOSS": Outcome.FAILURE,
    "UNAUTHENTICATED": Outcome.SUCCESS,
}


class RpcError(Exception):
    """Stands in for grpc.RpcError."""

    __module__ = "grpc"


class InactiveRpcError(RpcError):
    """Stands in for grpc._channel._InactiveRpcError, what a sync stub raises."""

    __module__ = "grpc._channel"

    def __init__(self, status: Any) -> None:
        super().__init__(f"status {status}")
        self.status = status

    def code(self) -> Any:
        return self.status


class AioRpcError(RpcError):
    """Stands in for grpc.aio.AioRpcError, what an asyncio stub raises."""

    __module__ = "grpc.aio._call"

    def __init__(self, status: Any) -> None:
        super().__init__(f"status {status}")
        self.status = status

    def code(self) -> Any:
        return self.status


class CancellableRpcError(InactiveRpcError):
    """Stands in for a sync grpcio call raised as its own error (grpc._channel._MultiThreadedRendezvous,
    what iterating a stream raises): its ``cancelled()`` is True only after this side's ``cancel()``."""

    def __init__(self, status: Any, cancelled: Any) -> None:
        super().__init__(status)
        self._cancelled = cancelled

    def cancelled(self) -> Any:
        if isinstance(self._cancelled, BaseException):
            raise self._cancelled
        return self._cancelled


class LookAlike(Exception):
    """Not from grpc, though it has a code() returning a gRPC status."""

    def __init__(self, status: Any) -> None:
        super().__init__(f"status {status}")
        self.status = status

    def code(self) -> Any:
        return self.status


def _single(balancer_factory: Any) -> Balancer:
    lb: Balancer = balancer_factory("roundrobin")
    lb.update([Invoker(1, "10.0.0.1:20880")])
    return lb


def counted(lb: Balancer) -> Tuple[int, int, int, int]:
    """(active, succeeded, failures, timeouts) of invoker 1."""
    row = by_id(lb.stats())[1]
    return row["active"], row["succeeded"], row["failures"], row["timeouts"]


#: What one call ending with each outcome adds to counted(): a timeout is a failure too.
COUNTS = {
    Outcome.SUCCESS: (0, 1, 0, 0),
    Outcome.FAILURE: (0, 0, 1, 0),
    Outcome.TIMEOUT: (0, 0, 1, 1),
    Outcome.CANCELLED: (0, 0, 0, 0),
}


def raise_in_call(lb: Balancer, error: BaseException) -> None:
    with pytest.raises(type(error)) as raised:
        with lb.call():
            raise error
    assert raised.value is error  # propagated unchanged


def test_the_table_covers_every_grpc_status() -> None:
    assert sorted(EXPECTED) == sorted(StatusCode.__members__)
    assert len(EXPECTED) == 17


@pytest.mark.parametrize("name", list(EXPECTED))
@pytest.mark.parametrize("error_class", [InactiveRpcError, AioRpcError])
def test_a_grpc_error_is_judged_by_its_status(balancer_factory: Any, error_class: Any, name: str) -> None:
    lb = _single(balancer_factory)
    raise_in_call(lb, error_class(StatusCode[name]))
    assert counted(lb) == COUNTS[EXPECTED[name]], name


@pytest.mark.parametrize(
    "error, outcome",
    [
        # Your own cancel(), then iterating the sync stream on: grpcio raises the stream.
        (CancellableRpcError(StatusCode.CANCELLED, True), Outcome.CANCELLED),
        # The provider's CANCELLED (its handler's abort, a reset stream): no cancel of this side.
        (CancellableRpcError(StatusCode.CANCELLED, False), Outcome.FAILURE),
        (InactiveRpcError(StatusCode.CANCELLED), Outcome.FAILURE),  # a sync unary call's error
        (AioRpcError(StatusCode.CANCELLED), Outcome.FAILURE),  # grpc.aio raises CancelledError for yours
        (CancellableRpcError(StatusCode.CANCELLED, 1), Outcome.FAILURE),  # not True
        (CancellableRpcError(StatusCode.CANCELLED, RuntimeError("broken")), Outcome.FAILURE),
        # cancelled() decides nothing for another status.
        (CancellableRpcError(StatusCode.NOT_FOUND, True), Outcome.SUCCESS),
        (CancellableRpcError(StatusCode.UNAVAILABLE, True), Outcome.FAILURE),
    ],
    ids=["own-cancel", "provider", "unary", "aio", "not-True", "cancelled-raises", "NOT_FOUND", "UNAVAILABLE"],
)
def test_cancelled_is_a_cancel_only_when_this_side_cancelled(
    balancer_factory: Any, error: BaseException, outcome: Outcome
) -> None:
    """docs/outcomes.md: gRPC CANCELLED is a cancel only from your own cancel, as grpc-go's and
    gRPC-java's policies read it; one the provider sent is a failure to serve."""
    lb = _single(balancer_factory)
    raise_in_call(lb, error)
    assert counted(lb) == COUNTS[outcome]


class DetailedRpcError(InactiveRpcError):
    """A grpc error with ``details()``, as grpcio's carry."""

    def __init__(self, status: Any, details: Any) -> None:
        super().__init__(status)
        self._details = details

    def details(self) -> Any:
        return self._details


@pytest.mark.parametrize(
    "details, outcome",
    [
        # gRPC's size check, whichever side's limit and whichever gRPC worded it: the provider
        # answered (or refused the request as any would): a success.
        ("Received message larger than max (29 vs. 1)", Outcome.SUCCESS),
        ("CLIENT: Received message larger than max (29 vs. 1)", Outcome.SUCCESS),
        ("grpc: received message larger than max (29 vs. 1)", Outcome.SUCCESS),
        ("gRPC message exceeds maximum size 1: 29", Outcome.SUCCESS),
        ("Decompressed message larger than max", Outcome.SUCCESS),
        # This side's send limit: never sent, no verdict.
        ("Sent message larger than max (29 vs. 1)", Outcome.CANCELLED),
        # The server shedding load: a failure.
        ("too many requests", Outcome.FAILURE),
        (None, Outcome.FAILURE),
    ],
)
def test_resource_exhausted_is_read_by_its_details(balancer_factory: Any, details: Any, outcome: Outcome) -> None:
    lb = _single(balancer_factory)
    raise_in_call(lb, DetailedRpcError(StatusCode.RESOURCE_EXHAUSTED, details))
    assert counted(lb) == COUNTS[outcome]


@pytest.mark.parametrize(
    "details, outcome",
    [
        # Sync grpcio's words for the calls of a channel this side closed: no provider's doing.
        ("Channel closed!", Outcome.CANCELLED),
        ("Stream removed (Channel closed!)", Outcome.CANCELLED),
        # Any other CANCELLED without this side's cancel() is the provider's.
        ("Received RST_STREAM with error code 8", Outcome.FAILURE),
        (None, Outcome.FAILURE),
    ],
)
def test_cancelled_by_closing_this_sides_channel_is_a_cancel(
    balancer_factory: Any, details: Any, outcome: Outcome
) -> None:
    lb = _single(balancer_factory)
    raise_in_call(lb, DetailedRpcError(StatusCode.CANCELLED, details))
    assert counted(lb) == COUNTS[outcome]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups are new in Python 3.11")
@pytest.mark.parametrize(
    "members, outcome",
    [
        (["NOT_FOUND"], Outcome.SUCCESS),  # the provider answered, in a task of the block's
        (["DEADLINE_EXCEEDED"], Outcome.TIMEOUT),
        (["UNAVAILABLE"], Outcome.FAILURE),
        (["NOT_FOUND", "DEADLINE_EXCEEDED"], Outcome.TIMEOUT),  # a timeout anywhere first
        (["NOT_FOUND", "UNAVAILABLE"], Outcome.FAILURE),  # then a failure; a success only if all are
    ],
)
def test_grpc_errors_in_an_exception_group_are_read_by_their_status(
    balancer_factory: Any, members: Any, outcome: Outcome
) -> None:
    """asyncio.TaskGroup (a bidi stream's reader and writer tasks, say) raises its tasks' gRPC
    errors in an ExceptionGroup: each is read by its status, as if raised alone."""
    lb = _single(balancer_factory)
    group = ExceptionGroup("tasks", [AioRpcError(StatusCode[name]) for name in members])  # noqa: F821
    raise_in_call(lb, group)
    assert counted(lb) == COUNTS[outcome]


def test_details_that_must_be_awaited_are_not_read(balancer_factory: Any) -> None:
    class AwaitedDetails(AioRpcError):
        async def details(self) -> str:
            return "Received message larger than max (29 vs. 1)"

    lb = _single(balancer_factory)
    with _no_warning():  # the unawaited coroutine is closed, not left to warn
        raise_in_call(lb, AwaitedDetails(StatusCode.RESOURCE_EXHAUSTED))
    assert counted(lb) == COUNTS[Outcome.FAILURE]


def _no_warning() -> Any:
    import warnings

    manager = warnings.catch_warnings()

    class _Checked:
        def __enter__(self) -> None:
            manager.__enter__()
            warnings.simplefilter("error")

        def __exit__(self, *exc: Any) -> None:
            manager.__exit__(*exc)

    return _Checked()


def test_a_subclass_of_a_grpc_error_is_a_grpc_error(balancer_factory: Any) -> None:
    class MyError(InactiveRpcError):  # defined here: its own module is this test's
        pass

    lb = _single(balancer_factory)
    raise_in_call(lb, MyError(StatusCode.NOT_FOUND))
    assert counted(lb) == COUNTS[Outcome.SUCCESS]


def test_async_call_reads_a_grpc_error(balancer_factory: Any) -> None:
    import asyncio

    lb = _single(balancer_factory)

    async def main() -> None:
        for status in (StatusCode.NOT_FOUND, StatusCode.DEADLINE_EXCEEDED):
            with pytest.raises(AioRpcError):
                async with lb.call():
                    raise AioRpcError(status)

    asyncio.run(main())
    assert counted(lb) == (0, 1, 1, 1)


@pytest.mark.parametrize("name", ["NOT_FOUND", "DEADLINE_EXCEEDED", "CANCELLED"])
def test_a_class_not_from_grpc_is_not_read(balancer_factory: Any, name: str) -> None:
    lb = _single(balancer_factory)
    raise_in_call(lb, LookAlike(StatusCode[name]))
    assert counted(lb) == COUNTS[Outcome.FAILURE]


@pytest.mark.parametrize("module", ["grpcio", "grpc_status", "mygrpc", "", "notgrpc.grpc"])
def test_only_the_grpc_package_counts(balancer_factory: Any, module: str) -> None:
    lb = _single(balancer_factory)
    error = LookAlike(StatusCode.NOT_FOUND)
    error.__class__ = type("Error", (LookAlike,), {"__module__": module})
    raise_in_call(lb, error)
    assert counted(lb) == COUNTS[Outcome.FAILURE]


class NotGrpcStatus(enum.Enum):
    TEAPOT = 418


class BadCode(RpcError):
    __module__ = "grpc._channel"

    def code(self) -> Any:
        raise RuntimeError("code() broke")


class CodeProperty(RpcError):
    __module__ = "grpc._channel"

    @property
    def code(self) -> Any:
        raise AttributeError("no code here")


class CodeNotCallable(RpcError):
    __module__ = "grpc._channel"
    code = StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    "error",
    [
        BadCode(),  # code() raises
        CodeProperty(),  # reading .code raises
        CodeNotCallable(),  # .code is the status itself, not a method
        RpcError(),  # a bare grpc.RpcError: no code() at all
        InactiveRpcError("NOT_FOUND"),  # a str, not an enum member
        InactiveRpcError(None),
        InactiveRpcError(5),
        InactiveRpcError(NotGrpcStatus.TEAPOT),  # a name gRPC does not have
    ],
    ids=lambda e: type(e).__name__ + ":" + str(getattr(e, "status", "")),
)
def test_what_cannot_be_read_falls_back_to_the_exception_rule(
    balancer_factory: Any, error: Exception
) -> None:
    lb = _single(balancer_factory)
    raise_in_call(lb, error)
    assert counted(lb) == COUNTS[Outcome.FAILURE]


def test_an_unreadable_grpc_timeout_error_stays_a_timeout(balancer_factory: Any) -> None:
    class GrpcTimeout(TimeoutError):
        __module__ = "grpc"

        def code(self) -> Any:
            raise ValueError("unreadable")

    lb = _single(balancer_factory)
    raise_in_call(lb, GrpcTimeout())
    assert counted(lb) == COUNTS[Outcome.TIMEOUT]


def test_a_weird_status_object_is_harmless(balancer_factory: Any) -> None:
    class Status(enum.Enum):
        NOT_FOUND = 5

        @property
        def name(self) -> str:
            raise RuntimeError("no name")

    lb = _single(balancer_factory)
    raise_in_call(lb, InactiveRpcError(Status.NOT_FOUND))
    assert counted(lb) == COUNTS[Outcome.FAILURE]


@pytest.mark.parametrize("chosen", list(Outcome))
def test_call_outcome_wins_over_the_grpc_status(balancer_factory: Any, chosen: Outcome) -> None:
    lb = _single(balancer_factory)
    with pytest.raises(InactiveRpcError):
        with lb.call() as call:
            call.outcome = chosen
            raise InactiveRpcError(StatusCode.NOT_FOUND)
    assert counted(lb) == COUNTS[chosen]


def test_code_is_not_called_when_the_block_ends_normally_or_outcome_is_set(balancer_factory: Any) -> None:
    calls = []

    class Watched(InactiveRpcError):
        def code(self) -> Any:
            calls.append(self)
            return super().code()

    lb = _single(balancer_factory)
    with lb.call():
        Watched(StatusCode.UNAVAILABLE)  # made, never raised
    with pytest.raises(Watched):
        with lb.call() as call:
            call.outcome = Outcome.SUCCESS
            raise Watched(StatusCode.UNAVAILABLE)
    assert calls == []
    assert counted(lb) == (0, 2, 0, 0)


class FutureCancelledError(Exception):
    """Stands in for grpc.FutureCancelledError: a sync future's result() after this side's cancel."""

    __module__ = "grpc"


class FutureTimeoutError(Exception):
    """Stands in for grpc.FutureTimeoutError: a sync future's result() whose wait ran out."""

    __module__ = "grpc"


class FutureCancelledLookAlike(Exception):
    """Named as grpc's, not from grpc."""


FutureCancelledLookAlike.__name__ = "FutureCancelledError"


@pytest.mark.parametrize(
    "error, outcome",
    [
        (FutureCancelledError(), Outcome.CANCELLED),
        (FutureTimeoutError(), Outcome.TIMEOUT),
        (FutureCancelledLookAlike(), Outcome.FAILURE),
    ],
    ids=["cancelled", "wait-ran-out", "look-alike"],
)
def test_the_sync_future_errors_are_read_by_name(balancer_factory: Any, error: BaseException, outcome: Outcome) -> None:
    lb = _single(balancer_factory)
    raise_in_call(lb, error)
    assert counted(lb) == COUNTS[outcome]


# -- call.stream(): a tracked stream ends with the block --------------------------------------


class Stream:
    """The shape of a sync grpcio stream (grpc._channel._MultiThreadedRendezvous) that call.stream()
    reads: done(), cancel(), code() (here only called once done), cancelled(). Made with a status,
    it ended with it (a CANCELLED one is then the provider's); cancel() ends it as this side's."""

    #: What cancel() sets as details (grpc.aio's text; sync grpcio's is "Locally cancelled by application!" too).
    LOCAL_CANCEL = "Locally cancelled by application!"

    def __init__(self, status: Any = None, details: Any = None) -> None:
        self.status = status  # None while open
        self.cancels = 0
        self.cancelled_here = False
        self._details = details

    def details(self) -> Any:
        return self._details

    def done(self) -> bool:
        return self.status is not None

    def cancel(self) -> bool:
        self.cancels += 1
        if self.status is None:
            self.status = StatusCode.CANCELLED
            self.cancelled_here = True
            self._details = self.LOCAL_CANCEL
            return True
        return False

    def cancelled(self) -> bool:
        # Sync grpcio: True only after this side's cancel().
        return self.cancelled_here

    def code(self) -> Any:
        assert self.status is not None, "code() of an open sync stream blocks"
        return self.status


class AioStream(Stream):
    """The shape of a grpc.aio stream: code() and details() are coroutines, and cancelled() is
    True for any CANCELLED status, the provider's too (grpc.aio reads it off the status)."""

    def cancelled(self) -> bool:
        return self.status is StatusCode.CANCELLED

    async def code(self) -> Any:  # type: ignore[override]
        return Stream.code(self)

    async def details(self) -> Any:  # type: ignore[override]
        return self._details


#: gRPC's size check's details, as the stream's own status ends it, and the outcome.
SIZE_LIMITS = [
    ("Received message larger than max (100000 vs. 1000)", Outcome.SUCCESS),
    ("CLIENT: Sent message larger than max (100000 vs. 1000)", Outcome.CANCELLED),
    ("too many requests", Outcome.FAILURE),
    (None, Outcome.FAILURE),
]


@pytest.mark.parametrize("details, outcome", SIZE_LIMITS)
def test_a_tracked_stream_over_a_size_limit_is_judged_as_its_raised_error(
    balancer_factory: Any, details: Any, outcome: Outcome
) -> None:
    """A RESOURCE_EXHAUSTED the block caught is read by its details, as one that leaves it."""
    lb = _single(balancer_factory)
    with lb.call() as call:
        call.stream(Stream(StatusCode.RESOURCE_EXHAUSTED, details))
    assert counted(lb) == COUNTS[outcome]
    raise_in_call(lb, DetailedRpcError(StatusCode.RESOURCE_EXHAUSTED, details))
    assert counted(lb) == tuple(2 * n for n in COUNTS[outcome])


@pytest.mark.parametrize("details, outcome", SIZE_LIMITS)
def test_an_aio_stream_over_a_size_limit_is_judged_as_its_raised_error(
    balancer_factory: Any, details: Any, outcome: Outcome
) -> None:
    import asyncio

    async def main(lb: Balancer) -> None:
        async with lb.call() as call:
            call.stream(AioStream(StatusCode.RESOURCE_EXHAUSTED, details))

    lb = _single(balancer_factory)
    asyncio.run(main(lb))
    assert counted(lb) == COUNTS[outcome]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_tracked_stream_that_ended_is_judged_by_its_status(balancer_factory: Any, name: str) -> None:
    """Even when the block caught its error: the status it ended with decides; OK a success."""
    want = Outcome.SUCCESS if name == "OK" else EXPECTED[name]
    lb = _single(balancer_factory)
    with lb.call() as call:
        stream = Stream(StatusCode[name])
        assert call.stream(stream) is stream
    assert (stream.cancels, counted(lb)) == (0, COUNTS[want])


def test_a_tracked_stream_is_a_cancel_after_your_cancel_and_a_failure_when_the_provider_cancelled(
    balancer_factory: Any,
) -> None:
    """A stream that ended CANCELLED in a block that ended normally: a cancel when this side
    cancelled it, a failure when the provider ended it so (as when its error is raised)."""
    lb = _single(balancer_factory)
    with lb.call() as call:
        stream = call.stream(Stream())
        stream.cancel()  # yours: cancelled() says so
    assert counted(lb) == COUNTS[Outcome.CANCELLED]
    with lb.call() as call:
        call.stream(Stream(StatusCode.CANCELLED, "handler gave up"))  # the provider's
    assert counted(lb) == COUNTS[Outcome.FAILURE]


def test_an_aio_stream_is_a_cancel_after_your_cancel_and_a_failure_when_the_provider_cancelled(
    balancer_factory: Any,
) -> None:
    """Under async with: grpc.aio's cancelled() is True for either, its details tell whose."""
    import asyncio

    async def main(lb: Balancer) -> None:
        async with lb.call() as call:
            stream = call.stream(AioStream())
            stream.cancel()  # yours: grpc.aio's own details
        assert counted(lb) == COUNTS[Outcome.CANCELLED]
        async with lb.call() as call:
            provider = call.stream(AioStream(StatusCode.CANCELLED, "handler gave up"))
        assert provider.cancelled()  # as grpc.aio says of it
        assert counted(lb) == COUNTS[Outcome.FAILURE]

    asyncio.run(main(_single(balancer_factory)))


def test_a_tracked_stream_left_open_is_cancelled(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    with lb.call() as call:
        stream = call.stream(Stream())
    assert (stream.cancels, counted(lb)) == (1, COUNTS[Outcome.CANCELLED])


@pytest.mark.parametrize(
    "error, outcome",
    [(ValueError("the block's bug"), Outcome.FAILURE), (TimeoutError(), Outcome.TIMEOUT), (KeyboardInterrupt(), Outcome.CANCELLED)],
    ids=["ValueError", "TimeoutError", "KeyboardInterrupt"],
)
def test_an_exception_decides_and_still_cancels_an_open_stream(
    balancer_factory: Any, error: BaseException, outcome: Outcome
) -> None:
    lb = _single(balancer_factory)
    with pytest.raises(type(error)) as raised:
        with lb.call() as call:
            stream = call.stream(Stream())
            raise error
    assert raised.value is error
    assert (stream.cancels, counted(lb)) == (1, COUNTS[outcome])


def test_call_outcome_wins_over_a_tracked_stream_which_is_still_ended(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    with lb.call() as call:
        open_stream = call.stream(Stream())
        call.outcome = Outcome.FAILURE
    with lb.call() as call:
        ended = call.stream(Stream(StatusCode.UNAVAILABLE))
        call.outcome = Outcome.SUCCESS
    assert (open_stream.cancels, ended.cancels) == (1, 0)
    assert counted(lb) == (0, 1, 1, 0)


def test_an_aio_stream_status_is_awaited_under_async_with(balancer_factory: Any) -> None:
    import asyncio

    async def main(lb: Balancer) -> None:
        for status in (StatusCode.OK, StatusCode.UNAVAILABLE, StatusCode.NOT_FOUND):
            async with lb.call() as call:
                call.stream(AioStream(status))
        async with lb.call() as call:
            call.stream(AioStream()).cancel()  # your cancel, then the block ends
        async with lb.call() as call:
            stream = call.stream(AioStream())  # left open
        assert stream.cancels == 1

    lb = _single(balancer_factory)
    asyncio.run(main(lb))
    assert counted(lb) == (0, 2, 1, 0)


class SlowAioStream(AioStream):
    """A done aio stream whose status takes its time to come."""

    async def code(self) -> Any:  # type: ignore[override]
        import asyncio

        await asyncio.sleep(10)
        return StatusCode.OK


def test_a_cancel_while_the_status_is_awaited_stays_a_cancel_when_the_balancer_closed(
    balancer_factory: Any,
) -> None:
    """A shutdown that closes the balancer and then cancels its tasks: the task is cancelled, as
    without the close (the report has nowhere to go; the cancellation must not be replaced)."""
    import asyncio

    async def main(lb: Balancer, close: bool) -> bool:
        async def rpc() -> None:
            async with lb.call() as call:
                call.stream(SlowAioStream(StatusCode.OK))

        task = asyncio.ensure_future(rpc())
        await asyncio.sleep(0.05)  # in __aexit__, awaiting code()
        if close:
            lb.close()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    lb = _single(balancer_factory)
    assert asyncio.run(main(lb, close=False))
    assert counted(lb) == COUNTS[Outcome.CANCELLED]
    assert asyncio.run(main(lb, close=True))


def test_an_aio_stream_under_a_plain_with_reads_only_a_cancel(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    with lb.call() as call:
        # cancelled() says so (grpc.aio says it of a provider's CANCELLED too: whose it was is in
        # the details, which only async with can await)
        call.stream(AioStream(StatusCode.CANCELLED))
    with lb.call() as call:
        call.stream(AioStream(StatusCode.UNAVAILABLE))  # cannot be awaited: the block's end decides
    assert counted(lb) == COUNTS[Outcome.SUCCESS]


class BrokenStream(Stream):
    def done(self) -> bool:
        raise RuntimeError("broken done()")


def test_a_broken_stream_never_replaces_the_block_outcome(balancer_factory: Any) -> None:
    lb = _single(balancer_factory)
    with lb.call() as call:
        call.stream(BrokenStream())
    with pytest.raises(InactiveRpcError):
        with lb.call() as call:
            call.stream(BrokenStream())
            raise InactiveRpcError(StatusCode.UNAVAILABLE)
    assert counted(lb) == (0, 1, 1, 0)


@pytest.mark.parametrize("not_a_call", [None, [b"a"], iter([b"a"]), object()], ids=["None", "list", "iterator", "object"])
def test_stream_takes_only_a_grpc_call_object(balancer_factory: Any, not_a_call: Any) -> None:
    lb = _single(balancer_factory)
    with pytest.raises(TypeError, match="grpcio call object"):
        with lb.call() as call:
            call.stream(not_a_call)
    assert counted(lb) == COUNTS[Outcome.FAILURE]  # the TypeError ended the block
