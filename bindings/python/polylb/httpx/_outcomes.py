"""How an HTTP exchange ends, as a verdict on the provider (docs/outcomes.md)."""

from __future__ import annotations

from typing import Callable, Optional

import httpx  # type: ignore[import-not-found, unused-ignore]  # optional: mypy without httpx too

from .._ffi import Outcome
from .._outcomes import _outcome_of

_SUCCESS, _FAILURE, _TIMEOUT, _CANCELLED = Outcome.SUCCESS, Outcome.FAILURE, Outcome.TIMEOUT, Outcome.CANCELLED

#: ``classify(response) -> Outcome | None``: the verdict of a response's status and headers
#: (its body not yet read); ``None`` leaves it to :func:`status_outcome`.
Classifier = Callable[[httpx.Response], Optional[Outcome]]


def status_outcome(status_code: int) -> Outcome:
    """The verdict of an HTTP status: 504 (a gateway's timeout in front of the provider) a
    timeout; 408 (the provider gave up reading the request), 429 (it sheds load) and the other
    5xx a failure; every other status an answer, a success (a 404 would be the same on any
    provider; a code past 599, which h11 takes, is no 5xx)."""
    if status_code == 504:
        return _TIMEOUT
    if 500 <= status_code <= 599 or status_code in (408, 429):
        return _FAILURE
    return _SUCCESS


def error_outcome(error: BaseException) -> Outcome:
    """The verdict of an exception that ended an exchange (raised sending it, or reading its
    body): httpx's timeouts a timeout, except ``PoolTimeout`` (no connection of this client's
    pool came free: nothing was sent, a cancel); a request httpx refuses on this side
    (``UnsupportedProtocol``, ``LocalProtocolError``) a cancel; other transport errors (a
    refused or reset connection, a protocol error of the provider's) a failure. Anything else
    as ``with lb.call()`` reads it: ``KeyboardInterrupt`` and ``asyncio.CancelledError`` a
    cancel, a timeout in an exception's chain a timeout, other exceptions a failure."""
    if isinstance(error, httpx.PoolTimeout):
        return _CANCELLED
    if isinstance(error, httpx.TimeoutException):
        return _TIMEOUT
    if isinstance(error, (httpx.UnsupportedProtocol, httpx.LocalProtocolError)):
        return _CANCELLED
    return _outcome_of(type(error), error)


def has_no_body(request: httpx.Request, response: httpx.Response) -> bool:
    """Whether the response has no body to wait for: its verdict is known at its headers."""
    status = response.status_code
    return (
        status < 200
        or status in (204, 304)
        or request.method == "HEAD"
        or response.headers.get("content-length") == "0"
    )
