"""Response bodies that end their exchange: the report waits for the body, as the latency
strategies need the time to the last byte and the in-flight strategies the body's life."""

from __future__ import annotations

import sys
from time import perf_counter_ns
from typing import AsyncIterator, Iterator, Optional

import httpx  # type: ignore[import-not-found, unused-ignore]  # optional: mypy without httpx too

from .._balancer import Balancer
from .._errors import BalancerClosedError
from .._ffi import Outcome
from ._outcomes import error_outcome

_CANCELLED = Outcome.CANCELLED


class Lifetime:
    """Whether the transport is closing: a request in flight that its close() ends (its
    connection closed under it) was ended by this side, a cancel, not by its provider."""

    __slots__ = ("closing",)

    def __init__(self) -> None:
        self.closing = False


class Report:
    """The one report of an exchange, however many ways it ends (an error while reading, then
    ``close()``, then garbage collection): the first decides, later ones do nothing."""

    __slots__ = ("_balancer", "_id", "_method", "_started_ns", "_done", "_lifetime")

    def __init__(self, balancer: Balancer, id: int, method: int, lifetime: Lifetime) -> None:
        self._balancer = balancer
        self._id = id
        self._method = method
        self._lifetime = lifetime
        self._done = False
        self._started_ns = perf_counter_ns()

    def error(self, error: BaseException) -> None:
        """Reports the exchange ended by ``error``: by :func:`error_outcome`, or a cancel once
        the transport is closing (the error is then most likely of the close's making)."""
        self(_CANCELLED if self._lifetime.closing else error_outcome(error))

    def closed(self, request: httpx.Request, handling: Optional[BaseException]) -> None:
        """Reports a body closed before its end: a cancel, unless httpx closes it while handling
        an error decoding this very body (its Content-Encoding, undone above the transport):
        the provider sent a broken body, reported by the error as one that broke off."""
        if isinstance(handling, httpx.DecodingError) and _request_of(handling) is request:
            self.error(handling)
        else:
            self(_CANCELLED)

    def __call__(self, outcome: Outcome) -> None:
        if self._done:
            return
        self._done = True
        elapsed_us = (perf_counter_ns() - self._started_ns) // 1000
        try:
            self._balancer.report(self._id, elapsed_us, outcome, self._method)
        except BalancerClosedError:
            pass  # closed during the exchange: nowhere to report, and the response is still the caller's


def _request_of(error: httpx.DecodingError) -> Optional[httpx.Request]:
    try:
        return error.request  # type: ignore[no-any-return, unused-ignore]
    except RuntimeError:  # raised without one
        return None


class ReportingStream(httpx.SyncByteStream):  # type: ignore[misc, unused-ignore]
    """A response body that reports its exchange when it ends: read to the end, ``verdict``
    (the status's); an error while reading, by the error (also one decoding the body, which
    httpx raises above the transport and then closes the body); closed (or dropped) before the
    end, a cancel."""

    def __init__(self, inner: httpx.SyncByteStream, report: Report, verdict: Outcome, request: httpx.Request) -> None:
        self._inner = inner
        self._request = request
        self._report = report
        self._verdict = verdict

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._inner:
                yield chunk
        except GeneratorExit:
            raise  # the reader stopped early: close() reports the cancel
        except BaseException as error:
            self._report.error(error)
            raise
        self._report(self._verdict)

    def close(self) -> None:
        handling = sys.exc_info()[1]  # httpx closes a response in the handler of what ended it
        try:
            self._inner.close()
        finally:
            self._report.closed(self._request, handling)  # nothing if the body was read to its end

    def __del__(self) -> None:
        # A response dropped unclosed must not stay counted in flight for good.
        try:
            self._report(_CANCELLED)
        except Exception:
            pass  # at interpreter exit the library may be gone


class AsyncReportingStream(httpx.AsyncByteStream):  # type: ignore[misc, unused-ignore]
    """:class:`ReportingStream` for the asyncio transport."""

    def __init__(self, inner: httpx.AsyncByteStream, report: Report, verdict: Outcome, request: httpx.Request) -> None:
        self._inner = inner
        self._request = request
        self._report = report
        self._verdict = verdict

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except GeneratorExit:
            raise
        except BaseException as error:  # asyncio.CancelledError too: a cancel
            self._report.error(error)
            raise
        self._report(self._verdict)

    async def aclose(self) -> None:
        handling = sys.exc_info()[1]
        try:
            await self._inner.aclose()
        finally:
            self._report.closed(self._request, handling)

    def __del__(self) -> None:
        try:
            self._report(_CANCELLED)
        except Exception:
            pass
