""":class:`BalancedTransport` and :class:`AsyncBalancedTransport`: httpx transports that send
each request to the endpoint polylb picks, over an inner transport, and report how it ended."""

from __future__ import annotations

import random as _random
import threading
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import httpx  # type: ignore[import-not-found, unused-ignore]  # optional: mypy without httpx too

from .._balancer import Balancer
from .._errors import BalancerClosedError, NoCandidateError, NoProviderError
from .._ffi import Outcome
from ._endpoints import Endpoint, Endpoints
from ._outcomes import Classifier, has_no_body, status_outcome
from ._routing import Target, route, unroute_location
from ._streams import AsyncReportingStream, Lifetime, Report, ReportingStream

_SUCCESS, _CANCELLED = Outcome.SUCCESS, Outcome.CANCELLED

#: The key of the picked endpoint's URL in ``response.extensions``.
ENDPOINT_EXTENSION = "polylb.endpoint"


class NoEndpointsError(httpx.ConnectError):  # type: ignore[misc, unused-ignore]
    """The transport has no endpoint to send the request to (none given, or all removed).

    An ``httpx.ConnectError``, as for a host that cannot be reached, so code that handles those
    handles this one; nothing was sent, so nothing is reported to the balancer."""


#: polylb's strategies that place each request by its key (docs/strategies.md).
_HASHING_STRATEGIES = frozenset({"consistenthash", "boundedhash", "maglev", "rendezvous"})


class _Balanced:
    """What both transports share: the balancer, the endpoints, the pick and the routing."""

    def __init__(
        self,
        config: Union[str, Balancer],
        endpoints: Sequence[Union[Endpoint, str]],
        method: Optional[Callable[[httpx.Request], str]],
        hash_key: Optional[Callable[[httpx.Request], Union[bytes, str, None]]],
        classify: Optional[Classifier],
        retries: int,
        hosts: Optional[Iterable[str]],
    ) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, not {retries!r}")
        if isinstance(hosts, (str, bytes)):
            raise TypeError("hosts takes a collection of names (e.g. ['orders']), not one string")
        self._hosts = None if hosts is None else frozenset(host.lower() for host in hosts)
        self._owns_balancer = not isinstance(config, Balancer)
        self._balancer = config if isinstance(config, Balancer) else Balancer(config)
        strategy = self._balancer.stats()["strategy"]
        if hash_key is None and strategy in _HASHING_STRATEGIES:
            if self._owns_balancer:
                self._balancer.close()
            # Every request would hash the empty key to one endpoint; polylb-spring refuses a
            # hashing strategy without a hash-key at startup, polylbhttp without WithHashKey.
            raise ValueError(
                f"loadbalance={strategy} places each request by its key, but no hash_key gives one "
                "(e.g. hash_key=lambda request: request.headers.get('x-user-id')): every request "
                "would go to one endpoint"
            )
        self._endpoints = Endpoints()
        self._current: Tuple[Endpoint, ...] = ()
        self._ids: Dict[str, int] = {}
        self._method = method
        self._hash_key = hash_key
        self._classify = classify
        self._retries = retries
        self._updating = threading.Lock()
        self._lifetime = Lifetime()
        try:
            self.update(endpoints)
        except BaseException:
            if self._owns_balancer:
                self._balancer.close()
            raise

    @property
    def balancer(self) -> Balancer:
        """The :class:`polylb.Balancer` (for ``stats()``); update endpoints through the transport."""
        return self._balancer

    @property
    def endpoints(self) -> Tuple[Endpoint, ...]:
        """The current endpoints, as the last accepted :meth:`update` gave them."""
        return self._current

    @property
    def ids(self) -> Dict[str, int]:
        """The polylb invoker id of each current endpoint, by its URL as given (the ``id`` of
        its row in ``balancer.stats()``); an URL keeps its id across updates."""
        return dict(self._ids)

    def update(self, endpoints: Sequence[Union[Endpoint, str]]) -> None:
        """Replaces the endpoints at once (a ``str`` is an :class:`Endpoint` of that URL).
        Endpoints that stay keep their state (calls in flight, latencies, ejections); requests
        already sent to one that leaves finish and are reported. A rejected set (a bad URL, the
        same URL twice, a negative weight) raises and changes nothing."""
        if isinstance(endpoints, (str, bytes)):
            raise TypeError("update() takes a sequence of endpoints (Endpoint or URL strings), not one string")
        given = tuple(Endpoint(e) if isinstance(e, str) else e for e in endpoints)
        with self._updating:  # the balancer's set and these two always from the same update
            invokers = self._endpoints.invokers(given)
            self._balancer.update(invokers)
            self._current = given
            self._ids = {endpoint.url: invoker.id for endpoint, invoker in zip(given, invokers)}

    def _balances(self, request: httpx.Request) -> bool:
        """Whether the request is to the service (``hosts``): by default every request is."""
        if self._hosts is None:
            return True
        url = request.url
        host = url.host.lower()
        # httpx drops a scheme's default port from its URLs: "orders:80" names http://orders too.
        port = url.port if url.port is not None else {"http": 80, "https": 443}.get(url.scheme)
        return host in self._hosts or f"{host}:{port}" in self._hosts

    def _key_and_method(self, request: httpx.Request) -> Tuple[Union[bytes, str, None], int]:
        key = self._hash_key(request) if self._hash_key is not None else None
        if self._hash_key is not None and not key:
            # A request without a key (None or empty) gets a random one, so that keyless
            # requests spread over the endpoints instead of all hashing the empty key to one,
            # as polylbhttp's WithHashKey and polylb-spring do.
            key = _random.getrandbits(64).to_bytes(8, "little")
        method = self._balancer.method(self._method(request)) if self._method is not None else 0
        return key, method

    def _select(self, request: httpx.Request, key: Union[bytes, str, None], method: int, exclude: Optional[List[int]]) -> int:
        try:
            return self._balancer.select(key, method, None, exclude)
        except NoProviderError:
            raise NoEndpointsError(
                "polylb: the balanced transport has no endpoints (give some to update())", request=request
            ) from None

    def _next(
        self,
        request: httpx.Request,
        key: Union[bytes, str, None],
        method: int,
        tried: List[int],
        last_error: Optional[BaseException],
    ) -> int:
        """The endpoint of the next attempt; when a retry cannot be picked (every endpoint
        tried, the set emptied or the balancer closed meanwhile), the last attempt's error is
        raised, as if there had been no retry left (as polylbhttp's WithRetries does)."""
        try:
            return self._select(request, key, method, tried or None)
        except (NoCandidateError, NoEndpointsError, BalancerClosedError):
            if last_error is None:
                raise
        raise last_error  # outside the handler: the error keeps its own context

    def _verdict(self, response: httpx.Response) -> Outcome:
        if self._classify is not None:
            verdict = self._classify(response)
            if verdict is not None:
                return verdict
        return status_outcome(response.status_code)

    def _attempt(
        self,
        request: httpx.Request,
        key: Union[bytes, str, None],
        method: int,
        tried: List[int],
        last_error: Optional[BaseException],
    ) -> Tuple[int, Target, Report, httpx.Request]:
        """One attempt's endpoint, its report and the request routed to it."""
        id = self._next(request, key, method, tried, last_error)
        target = self._endpoints.target(id)
        report = Report(self._balancer, id, method, self._lifetime)
        try:
            routed = route(request, target)
        except BaseException:
            report(_CANCELLED)  # never sent
            raise
        return id, target, report, routed

    def _failed(self, error: BaseException, report: Report, id: int, tried: List[int]) -> bool:
        """Reports an attempt that raised ``error``; whether to send the request again."""
        report.error(error)
        return self._retry(error, id, tried)

    def _retry(self, error: BaseException, id: int, tried: List[int]) -> bool:
        """Whether to send again, elsewhere: only a request that never reached the provider
        (its connection could not be made), so no request is ever applied twice."""
        if len(tried) >= self._retries or not isinstance(error, httpx.ConnectError) or self._lifetime.closing:
            return False
        tried.append(id)
        return True

    def _close_balancer(self) -> None:
        if self._owns_balancer:
            self._balancer.close()

    def __repr__(self) -> str:
        return f"<polylb.httpx.{type(self).__name__} endpoints={[e.url for e in self._current]} retries={self._retries}>"


class BalancedTransport(_Balanced, httpx.BaseTransport):  # type: ignore[misc, unused-ignore]
    """An ``httpx.BaseTransport`` that sends each request to an endpoint picked by polylb,
    through ``transport`` (``httpx.HTTPTransport()`` by default), and reports how it ended::

        client = httpx.Client(transport=BalancedTransport("peakewma", ["http://10.0.0.1:8080",
                                                                    "http://10.0.0.2:8080"]),
                              base_url="http://orders")

    ``config`` is a polylb config (a strategy name or a whole config string, as
    :class:`polylb.Balancer` takes it; the transport owns and closes that balancer) or a
    ``Balancer`` of yours (not closed with the transport). The request's scheme, host and port
    become the endpoint's; its path and query stay. ``method(request)`` names the request's
    method for per-method statistics; ``hash_key(request)`` gives the key of the hashing
    strategies; ``classify(response)`` judges a response (``None``: by its status, see
    :func:`status_outcome`). ``retries``: how many other endpoints a request whose connection
    could not be made (``httpx.ConnectError``) is sent to; 0 by default. ``hosts``: the names
    the service is called by (``["orders"]``; a host or ``host:port``, ignoring case): only
    requests to them are balanced, the others (a provider's redirect to another site) go
    straight through the inner transport, unreported; by default every request is balanced.

    The exchange is reported when it ends: a failure or timeout status at its headers, any
    other response when its body ends (read to the end: by its status; an error while reading:
    by the error; closed or dropped before the end: a cancel), an error raised while sending by
    :func:`error_outcome`. ``close()`` closes the inner transport, and the balancer if the
    transport made it."""

    def __init__(
        self,
        config: Union[str, Balancer],
        endpoints: Sequence[Union[Endpoint, str]],
        *,
        transport: Optional[httpx.BaseTransport] = None,
        method: Optional[Callable[[httpx.Request], str]] = None,
        hash_key: Optional[Callable[[httpx.Request], Union[bytes, str, None]]] = None,
        classify: Optional[Classifier] = None,
        retries: int = 0,
        hosts: Optional[Iterable[str]] = None,
    ) -> None:
        _Balanced.__init__(self, config, endpoints, method, hash_key, classify, retries, hosts)
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self._balances(request):
            return self._transport.handle_request(request)
        key, method = self._key_and_method(request)
        tried: List[int] = []
        last_error: Optional[BaseException] = None
        while True:
            id, target, report, routed = self._attempt(request, key, method, tried, last_error)
            try:
                response = self._transport.handle_request(routed)
            except BaseException as error:
                if self._failed(error, report, id, tried):
                    last_error = error
                    continue
                raise
            return self._respond(request, response, report, target)

    def _respond(self, request: httpx.Request, response: httpx.Response, report: Report, target: Target) -> httpx.Response:
        try:
            unroute_location(request, response, target)
            verdict = self._verdict(response)
        except BaseException:
            report(_CANCELLED)  # the classifier's own error: nothing is known of the provider
            response.close()
            raise
        response.extensions[ENDPOINT_EXTENSION] = target.url
        stream = response.stream
        if verdict is not _SUCCESS or has_no_body(request, response) or not isinstance(stream, httpx.SyncByteStream):
            report(verdict)  # nothing left that could change it
        else:
            response.stream = ReportingStream(stream, report, verdict, request)
        return response

    def close(self) -> None:
        """Closes the inner transport, and the balancer if the transport made it. Requests it
        ends in flight (their connections closed under them) are reported as cancels."""
        self._lifetime.closing = True
        try:
            self._transport.close()
        finally:
            self._close_balancer()


class AsyncBalancedTransport(_Balanced, httpx.AsyncBaseTransport):  # type: ignore[misc, unused-ignore]
    """:class:`BalancedTransport` for ``httpx.AsyncClient``: the inner ``transport`` is an
    ``httpx.AsyncBaseTransport`` (``httpx.AsyncHTTPTransport()`` by default), and a request
    whose task is cancelled (``asyncio.CancelledError``, also from ``asyncio.timeout()`` around
    it) is reported a cancel, before or during its body."""

    def __init__(
        self,
        config: Union[str, Balancer],
        endpoints: Sequence[Union[Endpoint, str]],
        *,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        method: Optional[Callable[[httpx.Request], str]] = None,
        hash_key: Optional[Callable[[httpx.Request], Union[bytes, str, None]]] = None,
        classify: Optional[Classifier] = None,
        retries: int = 0,
        hosts: Optional[Iterable[str]] = None,
    ) -> None:
        _Balanced.__init__(self, config, endpoints, method, hash_key, classify, retries, hosts)
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self._balances(request):
            return await self._transport.handle_async_request(request)
        key, method = self._key_and_method(request)
        tried: List[int] = []
        last_error: Optional[BaseException] = None
        while True:
            id, target, report, routed = self._attempt(request, key, method, tried, last_error)
            try:
                response = await self._transport.handle_async_request(routed)
            except BaseException as error:
                if self._failed(error, report, id, tried):
                    last_error = error
                    continue
                raise
            return await self._respond(request, response, report, target)

    async def _respond(self, request: httpx.Request, response: httpx.Response, report: Report, target: Target) -> httpx.Response:
        try:
            unroute_location(request, response, target)
            verdict = self._verdict(response)
        except BaseException:
            report(_CANCELLED)
            await response.aclose()
            raise
        response.extensions[ENDPOINT_EXTENSION] = target.url
        stream = response.stream
        if verdict is not _SUCCESS or has_no_body(request, response) or not isinstance(stream, httpx.AsyncByteStream):
            report(verdict)
        else:
            response.stream = AsyncReportingStream(stream, report, verdict, request)
        return response

    async def aclose(self) -> None:
        """Closes the inner transport, and the balancer if the transport made it. Requests it
        ends in flight (their connections closed under them) are reported as cancels."""
        self._lifetime.closing = True
        try:
            await self._transport.aclose()
        finally:
            self._close_balancer()
