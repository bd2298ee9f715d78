"""How a call ended, read from the exception (or gRPC status) its ``with`` block ended with.

grpc is never imported: its errors and statuses are recognised by their module and names.
"""

from __future__ import annotations

import builtins
import inspect
import sys
from enum import Enum
from typing import Any, Dict, List, Optional, Set, Tuple, Type

from ._ffi import Outcome

# Enum members bound once: on Python 3.11 each `Outcome.SUCCESS` lookup costs ~50-100 ns.
_SUCCESS, _FAILURE, _TIMEOUT, _CANCELLED = Outcome.SUCCESS, Outcome.FAILURE, Outcome.TIMEOUT, Outcome.CANCELLED


# What a gRPC status says about the provider (docs/outcomes.md), by grpc.StatusCode member name.
# An error of the service's own is a provider that answered: a success. OK, and any name not
# here, is not read: the exception's type decides, as for any other exception.
_GRPC_OUTCOMES: Dict[str, Outcome] = {
    "INVALID_ARGUMENT": _SUCCESS,
    "NOT_FOUND": _SUCCESS,
    "ALREADY_EXISTS": _SUCCESS,
    "PERMISSION_DENIED": _SUCCESS,
    "UNAUTHENTICATED": _SUCCESS,
    "FAILED_PRECONDITION": _SUCCESS,
    "ABORTED": _SUCCESS,
    "OUT_OF_RANGE": _SUCCESS,
    "UNAVAILABLE": _FAILURE,
    "RESOURCE_EXHAUSTED": _FAILURE,
    "UNIMPLEMENTED": _FAILURE,
    "INTERNAL": _FAILURE,
    "UNKNOWN": _FAILURE,
    "DATA_LOSS": _FAILURE,
    "DEADLINE_EXCEEDED": _TIMEOUT,
    # A cancel only when this side cancelled the call (docs/outcomes.md); a provider that ended
    # it with CANCELLED (its handler's abort, a server that reset the stream) failed to serve,
    # as grpc-go's and gRPC-java's policies report it. Callers check whose it was: _own_cancel.
    "CANCELLED": _FAILURE,
}


# grpc.Future's errors, by class name: ``result()`` of a future cancelled by this side, and of
# one that did not finish within the wait's timeout.
_GRPC_FUTURE_OUTCOMES: Dict[str, Outcome] = {
    "FutureCancelledError": _CANCELLED,
    "FutureTimeoutError": _TIMEOUT,
}


def _grpc_outcome(exc: BaseException) -> Optional[Outcome]:
    """The outcome of an error raised by grpcio, from its status; None for any other exception.

    grpc is never imported (the binding depends on nothing): an error is grpcio's when a class in
    its MRO comes from the ``grpc`` package (``grpc.RpcError``; sync stubs raise
    ``grpc._channel._InactiveRpcError``, asyncio stubs ``grpc.aio.AioRpcError``), and its status
    is what its ``code()`` returns, a ``grpc.StatusCode`` member, read by name. Whatever cannot be
    read this way, or raises while being read, gives None.
    """
    try:
        for cls in type(exc).__mro__:
            module = cls.__module__
            if module == "grpc" or module.startswith("grpc."):
                break
        else:
            return None
        # The sync future API's own errors carry no status: a future this side cancelled, and a
        # wait for its result that ran out.
        future_outcome = _GRPC_FUTURE_OUTCOMES.get(cls.__name__)
        if future_outcome is not None:
            return future_outcome
        code = getattr(exc, "code", None)
        if not callable(code):
            return None
        status = code()
        outcome = _status_outcome(status)
        if _is_cancelled(outcome, status) and _own_cancel(exc):
            return _CANCELLED
        if _is_resource_exhausted(outcome, status):
            limited = _size_limit_outcome(exc)
            return outcome if limited is None else limited
        if _is_internal(outcome, status) and _not_serialized(_sync_details(exc)):
            return _CANCELLED
        return outcome
    except Exception:  # a broken code() must not replace the block's own exception
        return None


# gRPC's size check's words (gRPC C-core's, which grpcio uses, grpc-go's and grpc-java's, as a
# provider written with them sends them back), lower-cased.
_RECEIVE_LIMIT_WORDS = (
    "received message larger than max",
    "received message after decompression larger than max",
    "decompressed message larger than max",
    "grpc message exceeds maximum size",
)


def _size_limit_outcome(exc: BaseException) -> Optional[Outcome]:
    """A RESOURCE_EXHAUSTED that gRPC's size check raised, by its details: a message over a
    receiver's limit (this side's, or the provider's refusing the request) is a success, as
    another provider would do the same; a request over this side's send limit was never sent, a
    cancel. None for any other RESOURCE_EXHAUSTED (a server shedding load: a failure)."""
    return _size_limit_of(_sync_details(exc))


def _sync_details(rpc: Any) -> Any:
    """``rpc.details()`` (a grpcio error or call), None when it has none or only an awaitable
    one (a grpc.aio call's: nothing to read without awaiting)."""
    details = getattr(rpc, "details", None)
    if not callable(details):
        return None
    text = details()
    if inspect.isawaitable(text):
        close = getattr(text, "close", None)
        if callable(close):
            close()
        return None
    return text


# What grpcio gives as the details of the INTERNAL status of a call whose request its
# serializer could not encode (raised before anything was sent, or ending a request stream on
# this side): the provider saw nothing, a cancel (docs/outcomes.md), not its failure.
_NOT_SERIALIZED_DETAILS = "Exception serializing request!"


def _not_serialized(details: Any) -> bool:
    return isinstance(details, str) and details == _NOT_SERIALIZED_DETAILS


def _size_limit_of(details: Any) -> Optional[Outcome]:
    """What gRPC's size check's ``details`` say (see _size_limit_outcome); None for other text."""
    if not isinstance(details, str):
        return None
    words = details.lower()
    if any(limit in words for limit in _RECEIVE_LIMIT_WORDS):
        return _SUCCESS
    if "sent message larger than max" in words:
        return _CANCELLED
    return None


def _own_cancel(rpc: Any) -> bool:
    """Whether this side cancelled ``rpc`` (a sync grpcio call, or the error it raised): its
    ``cancelled()`` is True, or its ``details()`` are those sync grpcio ends a call with when
    this side closed its channel (_SYNC_LOCAL_CANCEL_WORDS). Sync grpcio sets ``cancelled()``
    only on this side's ``cancel()`` (the stream raises itself then); its ``_InactiveRpcError``
    says False, and a ``grpc.aio.AioRpcError`` has no ``cancelled()``: grpc.aio raises
    ``asyncio.CancelledError`` after this side's cancel (and its channel's ``close()``), so an
    ``AioRpcError`` with ``CANCELLED`` is the provider's."""
    try:
        cancelled = getattr(rpc, "cancelled", None)
        if callable(cancelled) and cancelled() is True:
            return True
        details = getattr(rpc, "details", None)
        if not callable(details):
            return False
        text = details()
        if inspect.isawaitable(text):  # a grpc.aio call's: nothing to read without awaiting
            close = getattr(text, "close", None)
            if callable(close):
                close()
            return False
        return isinstance(text, str) and any(words in text for words in _SYNC_LOCAL_CANCEL_WORDS)
    except Exception:
        return False


# What sync grpcio gives as the details of the CANCELLED status it ends every call of a channel
# with when this side closes the channel (grpc/_channel.py, Channel._close: "Channel closed!",
# which a stream's reads as "Stream removed (Channel closed!)"). Its cancelled() stays False
# then, yet no provider did anything: grpc.aio's close() cancels its calls as cancel() does.
_SYNC_LOCAL_CANCEL_WORDS = ("Channel closed!",)


# What grpc.aio's ``cancel()`` sets as the details of the CANCELLED status it ends the call with
# (grpc/aio/_call.py and _interceptor.py, _LOCAL_CANCELLATION_DETAILS). A grpc.aio call's
# ``cancelled()`` is True for any CANCELLED status, the provider's too, so its details tell.
_AIO_LOCAL_CANCEL_DETAILS = "Locally cancelled by application!"


def _is_cancelled(outcome: Optional[Outcome], status: Any) -> bool:
    return outcome is _FAILURE and getattr(status, "name", None) == "CANCELLED"


def _is_internal(outcome: Optional[Outcome], status: Any) -> bool:
    return outcome is _FAILURE and getattr(status, "name", None) == "INTERNAL"


def _is_resource_exhausted(outcome: Optional[Outcome], status: Any) -> bool:
    return outcome is _FAILURE and getattr(status, "name", None) == "RESOURCE_EXHAUSTED"


def _status_outcome(status: Any, ok: Optional[Outcome] = None) -> Optional[Outcome]:
    """The outcome of a ``grpc.StatusCode`` (read by name): ``ok`` for OK, None for a value
    that is no status or a name not in the table."""
    if not isinstance(status, Enum):
        return None
    name = status.name
    if name == "OK":
        return ok
    return _GRPC_OUTCOMES.get(name) if isinstance(name, str) else None


# The timeouts that are classes of their own before Python 3.11 (3.10 for socket's), as
# (module, name): asyncio's (asyncio.wait_for, asyncio.timeout), concurrent.futures' (a
# Future's result(timeout=...)) and socket.timeout. From 3.11 each is the built-in TimeoutError.
_OTHER_TIMEOUTS = (("asyncio.exceptions", "TimeoutError"), ("concurrent.futures._base", "TimeoutError"), ("socket", "timeout"))

#: How many exceptions of a chain are looked into, the first included (as the Java adapter
#: bounds its walk of causes): a chain is short, and a cycle or a runaway one must not hang a report.
_CHAIN_LIMIT = 64


def _timeout_classes() -> Tuple[Type[BaseException], ...]:
    """TimeoutError and those of _OTHER_TIMEOUTS whose module is imported (no exception of a
    module that was never imported can exist, so none is imported here)."""
    classes: List[Type[BaseException]] = [TimeoutError]
    for module_name, name in _OTHER_TIMEOUTS:
        cls = getattr(sys.modules.get(module_name), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException) and cls not in classes:
            classes.append(cls)
    return tuple(classes)


def _is_timeout(exc_type: Type[BaseException], exc: Optional[BaseException]) -> bool:
    """Whether the exception is a timeout, or wraps one: its chain is followed as Go's
    errors.Is follows Unwrap and Rust's source(), through ``__cause__`` (``raise ... from``),
    else ``__context__`` (an exception raised while handling another, as requests raises its
    ReadTimeout over urllib3's ReadTimeoutError over TimeoutError), a
    ``urllib.error.URLError``'s ``reason`` when that is an exception (urllib's timeout), and an
    exception group's members (as Go's walk follows an ``Unwrap() []error``).

    ``__context__`` is followed even when ``__suppress_context__`` is set without a cause: that
    is ``raise exc from None``, which re-raisers use to shorten a traceback, not to say the
    exception has no cause (httpcore re-raises its ReadTimeout so, and httpx's ReadTimeout is
    raised from that one: its TimeoutError is then only in a suppressed context). An explicit
    ``__cause__`` replaces the context, as in a traceback."""
    timeouts = _timeout_classes()
    if issubclass(exc_type, timeouts):
        return True
    if exc is None:
        return False
    groups = _group_classes()
    url_error = getattr(sys.modules.get("urllib.error"), "URLError", None)
    pending = [exc]
    seen: Set[int] = set()
    while pending and len(seen) < _CHAIN_LIMIT:
        current = pending.pop()
        if id(current) in seen:
            continue  # a cycle
        seen.add(id(current))
        if isinstance(current, timeouts):
            return True
        # Pushed in reverse: the cause, then a URLError's reason, then the context is looked at.
        if current.__cause__ is None and current.__context__ is not None:
            pending.append(current.__context__)
        if isinstance(url_error, type) and isinstance(current, url_error):
            reason = getattr(current, "reason", None)
            if isinstance(reason, BaseException):
                pending.append(reason)
        if groups and isinstance(current, groups):
            # Its members, as Go's walk follows an `Unwrap() []error`, the first looked at first.
            pending.extend(reversed(_members(current)))
        if current.__cause__ is not None:
            pending.append(current.__cause__)
    return False


def _group_classes() -> Tuple[Type[BaseException], ...]:
    """BaseExceptionGroup (Python 3.11+; asyncio.TaskGroup raises one), and the ``exceptiongroup``
    backport's before 3.11 when it is imported (anyio and trio raise it there)."""
    classes: List[Type[BaseException]] = []
    for cls in (
        getattr(builtins, "BaseExceptionGroup", None),
        getattr(sys.modules.get("exceptiongroup"), "BaseExceptionGroup", None),
    ):
        if isinstance(cls, type) and issubclass(cls, BaseException) and cls not in classes:
            classes.append(cls)
    return tuple(classes)


def _members(group: BaseException) -> List[BaseException]:
    members = getattr(group, "exceptions", None)
    if not isinstance(members, (tuple, list)):
        return []
    return [member for member in members if isinstance(member, BaseException)]


#: The order in which a group's members decide, as Go's OutcomeOf reads a joined error: a
#: timeout anywhere in it first, then a cancel, then a failure; a success only if all are.
_GROUP_PRECEDENCE = (_TIMEOUT, _CANCELLED, _FAILURE, _SUCCESS)


def _group_outcome(group: BaseException, groups: Tuple[Type[BaseException], ...]) -> Optional[Outcome]:
    """The outcome of an exception group (asyncio.TaskGroup's, say, around one RPC's reader and
    writer tasks) from its members, each read as if the block had raised it alone: a member's
    timeout or gRPC status is not lost in the group. None for a group with no member to read.
    At most _CHAIN_LIMIT members, nested groups' included, are read."""
    outcomes: Set[Outcome] = set()
    pending = list(reversed(_members(group)))
    read = 0
    while pending and read < _CHAIN_LIMIT:
        member = pending.pop()
        read += 1
        if isinstance(member, groups):
            pending.extend(reversed(_members(member)))
            continue
        outcomes.add(_outcome_of(type(member), member))
    for outcome in _GROUP_PRECEDENCE:
        if outcome in outcomes:
            return outcome
    return None


def _outcome_of(exc_type: Optional[Type[BaseException]], exc: Optional[BaseException] = None) -> Outcome:
    if exc_type is None:
        return _SUCCESS
    if exc is not None:
        grpc_outcome = _grpc_outcome(exc)
        if grpc_outcome is not None:
            return grpc_outcome
        groups = _group_classes()
        if groups and isinstance(exc, groups):
            group_outcome = _group_outcome(exc, groups)
            if group_outcome is not None:
                return group_outcome
    if issubclass(exc_type, TimeoutError):  # also socket.timeout and, since 3.11, asyncio's
        return _TIMEOUT
    if issubclass(exc_type, Exception):
        # A timeout of its own class (before 3.11), or one wrapped in another exception.
        return _TIMEOUT if _is_timeout(exc_type, exc) else _FAILURE
    # KeyboardInterrupt, SystemExit, asyncio.CancelledError...: the call was abandoned by this
    # side, which says nothing about the provider, so only the in-flight count is undone.
    return _CANCELLED
