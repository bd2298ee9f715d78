"""``polylb.httpx``'s transports against real HTTP servers on 127.0.0.1 (threaded
``http.server``), sync and asyncio. Skipped without httpx.

Each server answers its own id as the body, or as the request asks: ``?status=N`` that status,
``?sleep=MS`` after a pause, ``/stream?chunks=N&gap=MS`` a chunked body of N chunks MS apart
(``chunks=0``: until the client goes), ``/cut`` a body shorter than its Content-Length (the
connection then closes), ``/badgzip`` a body that says it is gzip and is not, ``/redirect`` a redirect to
``http://<its Host header>/auth`` (which answers the Authorization header it got), ``/echo`` the path, query and Host header it got. A server's own
``status`` and ``delay_s`` apply to every request it gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import PYTHON_DIR, by_id
from polylb import Balancer, DuplicateIdError, NegativeWeightError

httpx = pytest.importorskip(
    "httpx",
    reason="httpx is not installed, so the httpx transports' tests cannot run "
    "(bindings/python/run-tests.sh installs it: pip install httpx)",
)
from polylb.httpx import AsyncBalancedTransport, BalancedTransport, Endpoint, NoEndpointsError  # noqa: E402

#: Long enough for a loaded machine to answer; never a measured quantity.
PATIENCE_S = 20


@dataclass
class Server:
    id: int
    url: str = ""
    status: int = 200
    delay_s: float = 0.0
    hits: int = 0
    http: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(server: Server) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client's pool reuses connections
        disable_nagle_algorithm = True  # headers and body go out as separate writes

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            with server.lock:
                server.hits += 1
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            if server.delay_s:
                time.sleep(server.delay_s)
            if "sleep" in query:
                time.sleep(int(query["sleep"]) / 1000)
            me = str(server.id).encode()
            if parts.path == "/echo":
                self._send(200, f"{self.path} {self.headers['Host']}".encode())
            elif parts.path == "/stream":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunks, gap = int(query.get("chunks", 3)), int(query.get("gap", 0)) / 1000
                sent = 0
                try:
                    while chunks == 0 or sent < chunks:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(me), me))
                        self.wfile.flush()
                        sent += 1
                        time.sleep(gap)
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    self.close_connection = True  # the client went
            elif parts.path == "/redirect":  # as frameworks build it: from the Host header
                self.send_response(int(query.get("status", 302)))
                self.send_header("Location", f"http://{self.headers['Host']}/auth?from={server.id}")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif parts.path == "/auth":
                self._send(200, f"{server.id} {self.headers.get('Authorization')}".encode())
            elif parts.path == "/badgzip":
                body = b"this is not gzip"
                self.send_response(200)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif parts.path == "/cut":
                self.send_response(200)
                self.send_header("Content-Length", "100")
                self.end_headers()
                self.wfile.write(b"0123456789")
                self.close_connection = True
            else:
                self._send(int(query.get("status", server.status)), me)

        do_HEAD = do_GET

    return Handler


def start(id: int) -> Server:
    server = Server(id)
    http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    http.daemon_threads = True
    server.http = http
    server.url = f"http://127.0.0.1:{http.server_address[1]}"
    threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def all_servers() -> Iterator[Dict[int, Server]]:
    made = {id: start(id) for id in (1, 2, 3, 4)}
    yield made
    for server in made.values():
        server.http.shutdown()
        server.http.server_close()


@pytest.fixture
def servers(all_servers: Dict[int, Server]) -> Dict[int, Server]:
    for server in all_servers.values():
        server.status, server.delay_s, server.hits = 200, 0.0, 0
    return all_servers


def refused_url() -> str:
    """A port nothing listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def five_sigma(n: int, p: float) -> float:
    return 5 * math.sqrt(n * p * (1 - p))


def rows(transport: Any) -> Dict[int, Dict[str, Any]]:
    return by_id(transport.balancer.stats())


def row_of(transport: Any, url: str) -> Dict[str, Any]:
    return rows(transport)[transport.ids[url]]


# The transports of these tests run on a balancer of the test's (balancer_factory's): an
# httpx client closes its transport on exit, and the transport the balancer it made, while
# the tests read the balancer's stats after the client is done.
@pytest.fixture
def transports() -> Iterator[List[Any]]:
    made: List[Any] = []
    yield made
    for transport in made:
        if isinstance(transport, BalancedTransport):
            transport.close()
        else:
            asyncio.run(transport.aclose())


@pytest.fixture
def make(transports: List[Any], balancer_factory: Any) -> Callable[..., BalancedTransport]:
    def make(config: str, endpoints: List[Any], **kwargs: Any) -> BalancedTransport:
        transport = BalancedTransport(balancer_factory(config), endpoints, **kwargs)
        transports.append(transport)
        return transport

    return make


@pytest.fixture
def make_async(transports: List[Any], balancer_factory: Any) -> Callable[..., AsyncBalancedTransport]:
    def make(config: str, endpoints: List[Any], **kwargs: Any) -> AsyncBalancedTransport:
        transport = AsyncBalancedTransport(balancer_factory(config), endpoints, **kwargs)
        transports.append(transport)
        return transport

    return make


def client(transport: BalancedTransport, **kwargs: Any) -> httpx.Client:
    return httpx.Client(transport=transport, base_url="http://orders", timeout=PATIENCE_S, **kwargs)


def outcome_counts(row: Dict[str, Any]) -> Dict[str, int]:
    return {name: row[name] for name in ("selected", "active", "succeeded", "failures", "timeouts")}


# -- balancing ---------------------------------------------------------------------------------


def test_requests_follow_the_weights(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    weights = {1: 100, 2: 200, 3: 300}
    transport = make("loadbalance=random&seed=11", [Endpoint(servers[i].url, weight=w) for i, w in weights.items()])
    n = 2400
    with client(transport) as http:
        answers = Counter(int(http.get("/who").text) for _ in range(n))
    for id, weight in weights.items():
        p = weight / 600
        assert abs(answers[id] - n * p) <= five_sigma(n, p), (id, answers)
        # Every request reported at the end of its body, a success: none left in flight.
        row = row_of(transport, servers[id].url)
        assert (row["selected"], row["succeeded"], row["active"]) == (answers[id], answers[id], 0)


def test_the_path_and_query_stay_and_the_host_is_the_endpoints(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [servers[2].url])
    with client(transport) as http:
        response = http.get("/echo", params={"q": "a b", "n": 1})
    port = servers[2].url.rsplit(":", 1)[1]
    assert response.text == f"/echo?q=a+b&n=1 127.0.0.1:{port}"
    assert response.extensions["polylb.endpoint"] == servers[2].url
    assert str(response.request.url) == "http://orders/echo?q=a+b&n=1"  # the caller's request is unchanged


#: The slow endpoint's delay: 30 to 100 times a local request's latency, even on a loaded machine.
SLOW_S = 0.3


def _run_threads(count: int, work: Callable[[int], None]) -> None:
    errors: List[BaseException] = []

    def run(index: int) -> None:
        try:
            work(index)
        except BaseException as error:  # reported below: an assertion in a thread would be lost
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PATIENCE_S * 3)
    assert not errors, errors


@pytest.mark.parametrize("strategy", ["loadbalance=peakewma&seed=5", "loadbalance=leastactive&seed=5"])
def test_a_slow_endpoint_is_avoided_under_concurrency(
    strategy: str, make: Callable[..., BalancedTransport], servers: Dict[int, Server]
) -> None:
    servers[3].delay_s = SLOW_S
    transport = make(strategy, [servers[i].url for i in (1, 2, 3)])
    threads, each = 8, 40
    with client(transport) as http:
        _run_threads(threads, lambda _: [http.get("/who") for _ in range(each)] and None)
    n = threads * each
    slow = row_of(transport, servers[3].url)["selected"]
    # A uniform pick would send n/3 there; the strategy must be far below (5 sigma under it).
    assert slow < n / 3 - five_sigma(n, 1 / 3), slow
    if strategy.startswith("loadbalance=peakewma"):
        # peakewma weighs latencies: the slow endpoint, 30 to 100 times slower, is picked only
        # when both fast ones hold many requests (4 to 7 of 320 in runs here). leastactive evens
        # out the requests in flight, so the slow one keeps a share that grows with the fast
        # ones' latency, that is with the machine's load (10 to 20 here): the 5 sigma bound only.
        assert slow <= n / 10, slow
    assert all(row["active"] == 0 for row in rows(transport).values())


def test_a_slow_endpoint_is_avoided_by_tasks(make_async: Callable[..., AsyncBalancedTransport], servers: Dict[int, Server]) -> None:
    servers[3].delay_s = SLOW_S
    transport = make_async("loadbalance=peakewma&seed=5", [servers[i].url for i in (1, 2, 3)])
    tasks, each = 16, 20

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, base_url="http://orders", timeout=PATIENCE_S) as http:

            async def worker() -> None:
                for _ in range(each):
                    (await http.get("/who")).raise_for_status()

            await asyncio.gather(*(worker() for _ in range(tasks)))

    asyncio.run(main())
    n = tasks * each
    slow = row_of(transport, servers[3].url)["selected"]
    assert slow < n / 3 - five_sigma(n, 1 / 3), slow
    assert slow <= n / 10, slow
    assert all(row["active"] == 0 for row in rows(transport).values())


def test_a_503_endpoint_is_ejected(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    servers[1].status = 503
    transport = make(
        "loadbalance=roundrobin&outlier.consecutiveFailures=3&outlier.baseEjectionMs=600000&outlier.maxEjectionPercent=50",
        [servers[1].url, servers[2].url],
    )
    with client(transport) as http:
        statuses = [http.get("/who").status_code for _ in range(20)]
        assert statuses.count(503) == 3  # then it was ejected
        assert [http.get("/who").text for _ in range(20)] == ["2"] * 20
    row = row_of(transport, servers[1].url)
    assert row["ejected"] and row["failures"] == 3 and servers[1].hits == 3


def test_a_key_sticks_to_one_endpoint_and_a_removal_moves_only_its_keys(
    make: Callable[..., BalancedTransport], servers: Dict[int, Server]
) -> None:
    urls = [servers[i].url for i in (1, 2, 3, 4)]
    transport = make("consistenthash", urls, hash_key=lambda request: request.headers.get("x-user"))
    users = [f"user-{i}" for i in range(40)]
    with client(transport) as http:

        def owners() -> Dict[str, str]:
            return {user: http.get("/who", headers={"x-user": user}).text for user in users}

        before = owners()
        assert owners() == before  # every key stays where it was
        assert len(set(before.values())) >= 3  # and the keys spread
        transport.update(urls[1:])  # server 1 leaves
        after = owners()
    for user in users:
        if before[user] != "1":
            assert after[user] == before[user], user
        else:
            assert after[user] != "1"


# -- outcomes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, succeeded, failures, timeouts",
    [(200, 1, 0, 0), (404, 1, 0, 0), (400, 1, 0, 0), (503, 0, 1, 0), (500, 0, 1, 0), (429, 0, 1, 0), (408, 0, 1, 0), (504, 0, 1, 1)],
)
def test_a_status_is_reported_by_the_rules(
    status: int, succeeded: int, failures: int, timeouts: int, make: Callable[..., BalancedTransport], servers: Dict[int, Server]
) -> None:
    transport = make("random", [servers[1].url])
    with client(transport) as http:
        assert http.get("/who", params={"status": status}).status_code == status
    expected = {"selected": 1, "active": 0, "succeeded": succeeded, "failures": failures, "timeouts": timeouts}
    assert outcome_counts(row_of(transport, servers[1].url)) == expected


def test_a_refused_connection_is_a_failure(make: Callable[..., BalancedTransport]) -> None:
    url = refused_url()
    transport = make("random", [url])
    with client(transport) as http, pytest.raises(httpx.ConnectError):
        http.get("/who")
    assert outcome_counts(row_of(transport, url)) == {"selected": 1, "active": 0, "succeeded": 0, "failures": 1, "timeouts": 0}


def test_a_read_timeout_is_a_timeout(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [servers[1].url])
    with httpx.Client(transport=transport, base_url="http://orders", timeout=0.2) as http, pytest.raises(httpx.ReadTimeout):
        http.get("/who", params={"sleep": 1000})
    row = row_of(transport, servers[1].url)
    assert outcome_counts(row) == {"selected": 1, "active": 0, "succeeded": 0, "failures": 1, "timeouts": 1}


def test_a_timeout_while_reading_the_body_is_a_timeout(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [servers[1].url])
    with httpx.Client(transport=transport, base_url="http://orders", timeout=0.3) as http, pytest.raises(httpx.ReadTimeout):
        http.get("/stream", params={"chunks": 3, "gap": 1000})
    assert outcome_counts(row_of(transport, servers[1].url))["timeouts"] == 1


def test_a_body_cut_short_is_a_failure(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [servers[1].url])
    with client(transport) as http, pytest.raises(httpx.RemoteProtocolError):
        http.get("/cut")
    assert outcome_counts(row_of(transport, servers[1].url)) == {"selected": 1, "active": 0, "succeeded": 0, "failures": 1, "timeouts": 0}


def test_a_stream_is_in_flight_until_its_body_ends_and_timed_to_it(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [servers[1].url])
    with client(transport) as http:
        with http.stream("GET", "/stream", params={"chunks": 4, "gap": 50}) as response:
            assert row_of(transport, servers[1].url)["active"] == 1  # headers in, body not yet
            assert response.read() == b"1111"
            row = row_of(transport, servers[1].url)
            assert (row["active"], row["succeeded"]) == (0, 1)  # reported at the body's end
    assert row_of(transport, servers[1].url)["succeeded"] == 1  # and only once, not again at close
    # Four chunks 50 ms apart: the latency reported is the body's, not the headers'.
    assert row["mean_success_us"] >= 150_000, row["mean_success_us"]


def test_a_stream_closed_before_its_end_is_a_cancel(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [servers[1].url])
    with client(transport) as http:
        with http.stream("GET", "/stream", params={"chunks": 0, "gap": 10}) as response:
            assert next(response.iter_bytes()) == b"1"
    assert outcome_counts(row_of(transport, servers[1].url)) == {"selected": 1, "active": 0, "succeeded": 0, "failures": 0, "timeouts": 0}


def test_a_failure_status_is_reported_at_its_headers(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [servers[1].url])
    with client(transport) as http:
        with http.stream("GET", "/who", params={"status": 503}):
            # The body is never read, yet the 503 already counts against the provider.
            assert outcome_counts(row_of(transport, servers[1].url))["failures"] == 1
        with http.stream("HEAD", "/who"):
            assert row_of(transport, servers[1].url)["succeeded"] == 1  # no body to wait for
    assert row_of(transport, servers[1].url)["active"] == 0


def test_a_response_dropped_unclosed_is_a_cancel(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [servers[1].url])
    with client(transport) as http:
        response = http.send(http.build_request("GET", "/who"), stream=True)
        assert row_of(transport, servers[1].url)["active"] == 1
        del response
        import gc

        gc.collect()
        assert outcome_counts(row_of(transport, servers[1].url)) == {"selected": 1, "active": 0, "succeeded": 0, "failures": 0, "timeouts": 0}


def test_a_classifier_decides(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    from polylb import Outcome

    transport = make("random", [servers[1].url], classify=lambda r: Outcome.FAILURE if r.status_code == 404 else None)
    with client(transport) as http:
        http.get("/who", params={"status": 404})
        http.get("/who", params={"status": 503})
        http.get("/who")
    counts = outcome_counts(row_of(transport, servers[1].url))
    assert (counts["succeeded"], counts["failures"]) == (1, 2)


def test_async_outcomes_and_a_cancelled_request(make_async: Callable[..., AsyncBalancedTransport], servers: Dict[int, Server]) -> None:
    url = servers[1].url
    transport = make_async("random", [url])

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, base_url="http://orders", timeout=PATIENCE_S) as http:
            assert (await http.get("/who")).text == "1"
            assert (await http.get("/who", params={"status": 504})).status_code == 504
            # Cancelled while waiting for the headers, then while reading the body.
            waiting = asyncio.ensure_future(http.get("/who", params={"sleep": 2000}))
            await asyncio.sleep(0.2)
            assert row_of(transport, url)["active"] == 1
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting

            async def read_forever() -> None:
                async with http.stream("GET", "/stream", params={"chunks": 0, "gap": 10}) as response:
                    async for _ in response.aiter_bytes():
                        pass

            reading = asyncio.ensure_future(read_forever())
            await asyncio.sleep(0.2)
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
            async with http.stream("GET", "/stream", params={"chunks": 0, "gap": 10}) as response:
                async for _ in response.aiter_bytes():
                    break  # closed before the end

    asyncio.run(main())
    # 200 a success; 504 a timeout; the two cancelled tasks and the stream closed early cancels.
    assert outcome_counts(row_of(transport, url)) == {"selected": 5, "active": 0, "succeeded": 1, "failures": 1, "timeouts": 1}


def test_async_requests_follow_the_weights(make_async: Callable[..., AsyncBalancedTransport], servers: Dict[int, Server]) -> None:
    weights = {1: 100, 2: 200, 3: 300}
    transport = make_async("loadbalance=random&seed=12", [Endpoint(servers[i].url, weight=w) for i, w in weights.items()])
    tasks, each = 8, 150
    n = tasks * each

    async def main() -> Counter[int]:
        async with httpx.AsyncClient(transport=transport, base_url="http://orders", timeout=PATIENCE_S) as http:

            async def worker() -> List[str]:
                return [(await http.get("/who")).text for _ in range(each)]

            answers = await asyncio.gather(*(worker() for _ in range(tasks)))
        return Counter(int(answer) for answers_of_one in answers for answer in answers_of_one)

    answers = asyncio.run(main())
    for id, weight in weights.items():
        assert abs(answers[id] - n * weight / 600) <= five_sigma(n, weight / 600), (id, answers)
    assert all(row["active"] == 0 for row in rows(transport).values())


def test_in_flight_is_back_to_zero_after_a_mix(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    refused = refused_url()
    transport = make("loadbalance=leastactive&seed=3", [servers[1].url, servers[2].url, refused])
    kinds = ["ok", "503", "404", "stream-early", "stream-full", "timeout", "cut", "head"]

    http = client(transport)  # one client for all threads: closing a client closes its transport
    expected_errors = (httpx.ConnectError, httpx.ReadTimeout, httpx.RemoteProtocolError)

    def work(index: int) -> None:
        chooser = random.Random(index)
        for _ in range(30):
            kind = chooser.choice(kinds)
            with contextlib.suppress(*expected_errors):
                if kind == "ok":
                    http.get("/who")
                elif kind in ("503", "404"):
                    http.get("/who", params={"status": kind})
                elif kind == "timeout":
                    http.get("/who", params={"sleep": 300}, timeout=0.05)
                elif kind == "cut":
                    http.get("/cut")
                elif kind == "head":
                    http.head("/who")
                else:
                    with http.stream("GET", "/stream", params={"chunks": 5}) as response:
                        for _ in response.iter_bytes():
                            if kind == "stream-early":
                                break

    _run_threads(6, work)
    http.close()
    table = rows(transport)
    assert sum(row["selected"] for row in table.values()) == 6 * 30
    assert [row["active"] for row in table.values()] == [0, 0, 0]
    assert table[transport.ids[refused]]["failures"] == table[transport.ids[refused]]["selected"] > 0


# -- retries -----------------------------------------------------------------------------------


def test_a_refused_connection_is_retried_on_another_endpoint(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    refused = refused_url()
    transport = make("roundrobin", [refused, servers[1].url], retries=1)
    with client(transport) as http:
        assert [http.get("/who").text for _ in range(10)] == ["1"] * 10
    refused_row, live_row = row_of(transport, refused), row_of(transport, servers[1].url)
    assert (refused_row["selected"], refused_row["failures"]) == (5, 5)  # each attempt reported
    assert (live_row["selected"], live_row["succeeded"]) == (10, 10)


def test_retries_stop_when_every_endpoint_was_tried(make: Callable[..., BalancedTransport]) -> None:
    urls = [refused_url(), refused_url()]
    transport = make("random", urls, retries=5)
    with client(transport) as http, pytest.raises(httpx.ConnectError) as info:
        http.get("/who")
    assert not isinstance(info.value, NoEndpointsError)
    assert [row["selected"] for row in rows(transport).values()] == [1, 1]


def test_retries_are_capped(make: Callable[..., BalancedTransport]) -> None:
    transport = make("random", [refused_url() for _ in range(3)], retries=1)
    with client(transport) as http, pytest.raises(httpx.ConnectError):
        http.get("/who")
    assert sorted(row["selected"] for row in rows(transport).values()) == [0, 1, 1]  # two attempts


def test_without_retries_and_for_other_errors_nothing_is_sent_again(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    refused = refused_url()
    transport = make("roundrobin", [refused, servers[1].url])
    with client(transport) as http:
        with pytest.raises(httpx.ConnectError):
            for _ in range(2):
                http.get("/who")
    retrying = make("random", [servers[1].url, servers[2].url], retries=3)
    with httpx.Client(transport=retrying, base_url="http://orders", timeout=0.1) as http, pytest.raises(httpx.ReadTimeout):
        http.get("/who", params={"sleep": 500})  # it may have reached the provider: never resent
    assert sum(row["selected"] for row in rows(retrying).values()) == 1


# -- membership --------------------------------------------------------------------------------


def test_a_rejected_update_keeps_the_old_set(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [servers[1].url, servers[2].url])
    before, ids = transport.endpoints, transport.ids
    for bad, error in [
        ([servers[3].url, servers[3].url + "/"], DuplicateIdError),  # the same origin twice
        ([Endpoint(servers[3].url, weight=-1)], NegativeWeightError),
        ([servers[3].url, "http://10.0.0.1:80/prefix"], ValueError),
        ([servers[3].url, "ftp://10.0.0.1"], ValueError),
        (servers[3].url, TypeError),
    ]:
        with pytest.raises(error):
            transport.update(bad)
        assert transport.endpoints == before and transport.ids == ids
        assert sorted(row["id"] for row in rows(transport).values()) == sorted(ids.values())
    with client(transport) as http:
        assert {http.get("/who").text for _ in range(30)} == {"1", "2"}


def test_updates_while_requests_run(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    sets = [[servers[1].url, servers[2].url], [servers[3].url], [servers[2].url, servers[4].url]]
    transport = make("leastactive", sets[0])
    ids = {url: id for url, id in transport.ids.items()}
    stop = threading.Event()
    seen: List[str] = []

    http = client(transport)  # one client for all threads: closing a client closes its transport

    def work(_: int) -> None:
        while not stop.is_set():
            response = http.get("/who", params={"sleep": 2})
            assert response.status_code == 200
            seen.append(response.extensions["polylb.endpoint"])

    threads = [threading.Thread(target=lambda: _run_threads(4, work))]
    threads[0].start()
    try:
        for round in range(30):
            transport.update(sets[round % 3])
            for url, id in transport.ids.items():
                assert ids.setdefault(url, id) == id  # a URL keeps its id across updates
            time.sleep(0.01)
    finally:
        stop.set()
        threads[0].join(PATIENCE_S)
    http.close()
    assert set(seen) == {servers[i].url for i in (1, 2, 3, 4)}
    for url in transport.ids:
        assert row_of(transport, url)["active"] == 0
    # Requests to endpoints that left were reported too: the hits are all counted.
    assert len(seen) == sum(servers[i].hits for i in (1, 2, 3, 4))


def test_no_endpoints_raises_and_reports_nothing(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make("random", [])
    with client(transport) as http, pytest.raises(NoEndpointsError):
        http.get("/who")
    transport.update([servers[1].url])
    with client(transport) as http:
        assert http.get("/who").text == "1"


def test_a_balancer_of_yours_is_used_and_left_open(servers: Dict[int, Server]) -> None:
    with Balancer("roundrobin") as lb:
        with BalancedTransport(lb, [servers[1].url, servers[2].url]) as transport, client(transport) as http:
            assert [http.get("/who").text for _ in range(4)] in (["1", "2"] * 2, ["2", "1"] * 2)
        assert not lb.closed and sum(row["succeeded"] for row in lb.stats()["invokers"]) == 4
    owned = BalancedTransport("random", [servers[1].url])
    owned.close()
    assert owned.balancer.closed


def test_polylb_imports_without_httpx() -> None:
    script = (
        "import sys; sys.modules['httpx'] = None\n"
        "import polylb\n"
        "try:\n    import polylb.httpx\nexcept ImportError as error:\n    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=PYTHON_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install 'polylb[httpx]'" in done.stdout


def test_readme_example_runs() -> None:
    readme = (PYTHON_DIR / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## With httpx: `polylb\.httpx\.BalancedTransport`\n(.*?)(?=^## )", readme, flags=re.M | re.S)
    assert section, "README has no BalancedTransport section"
    blocks = re.findall(r"```python\n(.*?)```", section.group(1), flags=re.S)
    assert len(blocks) == 1 and "BalancedTransport(" in blocks[0]
    exec(compile(blocks[0], "README.md:balanced-transport", "exec"), {"__name__": "readme"})


@pytest.mark.parametrize("fast", [True, False], ids=["parts-swapped", "copy_with"])
def test_a_routed_url_is_what_copy_with_gives(fast: bool, monkeypatch: Any) -> None:
    from polylb.httpx import _routing

    assert _routing.routed_url is _routing._fast_url  # this httpx has the parts the fast path swaps
    monkeypatch.setattr(_routing, "routed_url", _routing._fast_url if fast else _routing._slow_url)
    for endpoint in ("http://10.0.0.1:8080", "http://10.0.0.1:80", "https://Bücher.example:8443", "http://[::1]:81/"):
        target = _routing.target_of(endpoint)
        for raw in ("http://svc/a%20b/c?x=1&y=%C3%A9", "https://user:pw@svc:8443/", "http://svc", "http://svc/?"):
            request = httpx.Request("GET", raw, headers={"x-k": "v"})
            routed = _routing.route(request, target)
            expected = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
            assert (routed.url, str(routed.url), routed.url.raw_path) == (expected, str(expected), expected.raw_path)
            assert routed.headers["host"] == target.authority and routed.headers["x-k"] == "v"
            assert request.url == httpx.URL(raw)  # the caller's request is left as it was


def test_a_pool_timeout_sent_nothing_and_is_a_cancel(balancer_factory: Any, servers: Dict[int, Server]) -> None:
    # One connection in the client's pool, held by an open stream: the next request cannot
    # get one. That says nothing about the provider.
    inner = httpx.HTTPTransport(limits=httpx.Limits(max_connections=1))
    transport = BalancedTransport(balancer_factory("random"), [servers[1].url], transport=inner)
    with httpx.Client(transport=transport, base_url="http://orders", timeout=httpx.Timeout(PATIENCE_S, pool=0.1)) as http:
        with http.stream("GET", "/stream", params={"chunks": 0, "gap": 10}) as holding:
            with pytest.raises(httpx.PoolTimeout):
                http.get("/who")
            row = row_of(transport, servers[1].url)
            assert (row["selected"], row["active"], row["failures"]) == (2, 1, 0)  # only the stream left
            assert next(holding.iter_bytes()) == b"1"
    assert outcome_counts(row_of(transport, servers[1].url)) == {"selected": 2, "active": 0, "succeeded": 0, "failures": 0, "timeouts": 0}


def test_endpoints_carry_their_zone(make: Callable[..., BalancedTransport], servers: Dict[int, Server]) -> None:
    transport = make(
        "loadbalance=random&zone=eu&seed=4",
        [Endpoint(servers[1].url, zone="us"), Endpoint(servers[2].url, zone="eu"), Endpoint(servers[3].url, zone="us")],
    )
    with client(transport) as http:
        assert {http.get("/who").text for _ in range(30)} == {"2"}  # the consumer's own zone only


def test_async_retries_errors_and_no_endpoints(make_async: Callable[..., AsyncBalancedTransport], servers: Dict[int, Server]) -> None:
    refused = refused_url()
    transport = make_async("roundrobin", [refused, servers[1].url], retries=1)
    empty = make_async("random", [])

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, base_url="http://orders", timeout=0.3) as http:
            assert [(await http.get("/who")).text for _ in range(6)] == ["1"] * 6
            with pytest.raises(httpx.ReadTimeout):
                await http.get("/who", params={"sleep": 1000})
            with pytest.raises(httpx.RemoteProtocolError):
                await http.get("/cut")
        async with httpx.AsyncClient(transport=empty, base_url="http://orders") as http:
            with pytest.raises(NoEndpointsError):
                await http.get("/who")

    asyncio.run(main())
    down = outcome_counts(row_of(transport, refused))
    assert down["selected"] == down["failures"] >= 1 and down["active"] == 0  # each refusal a failure
    live = outcome_counts(row_of(transport, servers[1].url))
    # Every request reached it once: the refused attempts were resent there, the read timeout
    # and the cut body were not (they had reached the provider).
    assert live == {"selected": 8, "active": 0, "succeeded": 6, "failures": 2, "timeouts": 1}


def test_requests_in_flight_when_the_transport_closes_are_cancels(
    make: Callable[..., BalancedTransport], make_async: Callable[..., AsyncBalancedTransport], servers: Dict[int, Server]
) -> None:
    # Closing the client (so the transport and its connections) under requests still waiting
    # for their headers or reading their bodies is this side's doing: it says nothing of the
    # provider, which must not be counted failing (nor ejected) for it.
    url = servers[1].url
    transport = make("random", [url])
    http = client(transport)
    errors: List[BaseException] = []

    def waiting() -> None:
        try:
            http.get("/who", params={"sleep": 1000})
        except httpx.TransportError as error:
            errors.append(error)

    def reading() -> None:
        try:
            with http.stream("GET", "/stream", params={"chunks": 0, "gap": 10}) as response:
                for _ in response.iter_bytes():
                    pass
        except httpx.TransportError as error:
            errors.append(error)

    threads = [threading.Thread(target=work) for work in (waiting, waiting, reading)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + PATIENCE_S
    while row_of(transport, url)["active"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # the stream's body is being read
    http.close()
    for thread in threads:
        thread.join(PATIENCE_S)
    assert len(errors) == 3, errors
    assert outcome_counts(row_of(transport, url)) == {"selected": 3, "active": 0, "succeeded": 0, "failures": 0, "timeouts": 0}

    async_transport = make_async("random", [url])

    async def main() -> List[Any]:
        http = httpx.AsyncClient(transport=async_transport, base_url="http://orders", timeout=PATIENCE_S)

        async def waiting() -> None:
            await http.get("/who", params={"sleep": 1000})

        async def reading() -> None:
            async with http.stream("GET", "/stream", params={"chunks": 0, "gap": 10}) as response:
                async for _ in response.aiter_bytes():
                    pass

        tasks = [asyncio.ensure_future(work()) for work in (waiting, waiting, reading)]
        while row_of(async_transport, url)["active"] < 3:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        await http.aclose()
        return await asyncio.gather(*tasks, return_exceptions=True)

    ended = asyncio.run(main())
    assert all(isinstance(error, httpx.TransportError) for error in ended), ended
    assert outcome_counts(row_of(async_transport, url)) == {"selected": 3, "active": 0, "succeeded": 0, "failures": 0, "timeouts": 0}


def test_a_body_that_cannot_be_decoded_is_a_failure(
    make: Callable[..., BalancedTransport], make_async: Callable[..., AsyncBalancedTransport], servers: Dict[int, Server]
) -> None:
    # httpx decodes the body (Content-Encoding) above the transport: the provider sent a
    # broken body, an error while reading it, not a body the caller gave up on.
    url = servers[1].url
    transport = make("random", [url])
    with client(transport) as http:
        with pytest.raises(httpx.DecodingError):
            http.get("/badgzip")
        with pytest.raises(httpx.DecodingError), http.stream("GET", "/badgzip") as response:
            response.read()
        with http.stream("GET", "/stream", params={"chunks": 0, "gap": 10}) as response:
            with contextlib.suppress(httpx.DecodingError):
                next(response.iter_bytes())
                raise httpx.DecodingError("another response's, not this one's")
    assert outcome_counts(row_of(transport, url)) == {"selected": 3, "active": 0, "succeeded": 0, "failures": 2, "timeouts": 0}

    async_transport = make_async("random", [url])

    async def main() -> None:
        async with httpx.AsyncClient(transport=async_transport, base_url="http://orders", timeout=PATIENCE_S) as http:
            with pytest.raises(httpx.DecodingError):
                await http.get("/badgzip")

    asyncio.run(main())
    assert outcome_counts(row_of(async_transport, url)) == {"selected": 1, "active": 0, "succeeded": 0, "failures": 1, "timeouts": 0}


def test_a_redirect_to_the_endpoint_itself_stays_on_the_callers_origin(
    make: Callable[..., BalancedTransport], make_async: Callable[..., AsyncBalancedTransport], servers: Dict[int, Server]
) -> None:
    # The provider sees its own name in Host, so an absolute redirect of its (a trailing-slash
    # redirect of Starlette or Werkzeug) names the endpoint: to httpx another origin, for which
    # it drops the Authorization header and which the caller never asked for.
    urls = [servers[1].url, servers[2].url]
    transport = make("roundrobin", urls)
    with client(transport, headers={"Authorization": "Bearer t"}, follow_redirects=True) as http:
        for _ in range(4):
            response = http.get("/redirect")
            assert response.text.split()[1:] == ["Bearer", "t"], response.text
            assert response.url.host == "orders" and response.url.path == "/auth"
            assert [r.status_code for r in response.history] == [302]
        unfollowed = http.get("/redirect", params={"status": 307}, follow_redirects=False)
        assert re.fullmatch(r"http://orders/auth\?from=[12]", unfollowed.headers["location"]), unfollowed.headers
        assert unfollowed.next_request is not None and unfollowed.next_request.url.host == "orders"
    # Each hop a request of its own, picked and reported once.
    assert [(row["selected"], row["succeeded"], row["active"]) for row in rows(transport).values()] == [(5, 5, 0), (4, 4, 0)]

    async_transport = make_async("random", [servers[3].url])

    async def main() -> httpx.Response:
        async with httpx.AsyncClient(
            transport=async_transport, base_url="http://orders", headers={"Authorization": "Bearer t"}, follow_redirects=True
        ) as http:
            return await http.get("/redirect")

    response = asyncio.run(main())
    assert response.text == "3 Bearer t" and str(response.url) == "http://orders/auth?from=3"


def test_with_hosts_only_requests_to_the_service_are_balanced(
    make: Callable[..., BalancedTransport], make_async: Callable[..., AsyncBalancedTransport], servers: Dict[int, Server]
) -> None:
    # A request to another site (a provider's redirect there, say) goes there with `hosts`,
    # unbalanced and unreported; without it every request is balanced, that one too.
    urls, elsewhere = [servers[1].url, servers[2].url], servers[3]
    for hosts in (None, ["ORDERS"]):
        transport = make("loadbalance=random&seed=3", urls, hosts=hosts)
        elsewhere.hits = 0
        with client(transport) as http:
            assert [http.get("/").status_code for _ in range(6)] == [200] * 6
            answer = http.get(f"{elsewhere.url}/direct")
        selected = sum(row["selected"] for row in rows(transport).values())
        if hosts is None:
            assert (answer.text in ("1", "2"), elsewhere.hits, selected) == (True, 0, 7)
        else:
            assert (answer.text, elsewhere.hits, selected) == ("3", 1, 6)
            assert "polylb.endpoint" not in answer.extensions

    async_transport = make_async("random", urls, hosts=["orders:80"])

    async def main() -> List[str]:
        async with httpx.AsyncClient(transport=async_transport, base_url="http://orders:80") as http:
            return [(await http.get(url)).text for url in ("/", f"{elsewhere.url}/")]

    elsewhere.hits = 0
    balanced, direct = asyncio.run(main())
    assert balanced in ("1", "2") and direct == "3" and elsewhere.hits == 1
    with pytest.raises(TypeError, match="not one string"):
        make("random", urls, hosts="orders")


def test_a_status_past_599_is_no_5xx() -> None:
    # Every adapter reads a code past 599 (h11 and net/http take any three digits) as an
    # answer: polylb-spring's and polylb-tower's rules stop at 599.
    from polylb import Outcome
    from polylb.httpx import status_outcome

    assert status_outcome(599) is Outcome.FAILURE
    assert status_outcome(600) is Outcome.SUCCESS
    assert status_outcome(999) is Outcome.SUCCESS


@pytest.mark.parametrize("missing", [None, "", b""])
def test_requests_without_a_key_spread(missing: Any, make: Callable[..., BalancedTransport]) -> None:
    # As polylbhttp's WithHashKey and polylb-spring: a request whose key function gives no key
    # is placed by a random key, not all on the empty key's endpoint.
    hosts: Counter = Counter()

    def answer(request: httpx.Request) -> httpx.Response:
        hosts[request.url.host] += 1
        return httpx.Response(200)

    urls = [f"http://10.0.0.{i}:8080" for i in range(1, 5)]
    transport = make("consistenthash", urls, transport=httpx.MockTransport(answer), hash_key=lambda request: missing)
    with client(transport) as http:
        for _ in range(200):
            http.get("/who")
    assert len(hosts) == 4 and min(hosts.values()) >= 20, hosts


def test_a_host_the_caller_set_is_kept(make: Callable[..., BalancedTransport]) -> None:
    # As polylbhttp: the Host httpx sets (the URL's host) becomes the endpoint's; one the caller
    # set to another name (a virtual host behind the endpoint) is the caller's to keep.
    sent: List[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers["host"])
        return httpx.Response(200)

    transport = make("random", ["http://10.0.0.1:8080"], transport=httpx.MockTransport(answer))
    with client(transport) as http:
        http.get("/who")
        http.get("/who", headers={"Host": "vhost.example"})
        http.get("http://Orders:80/who")
    assert sent == ["10.0.0.1:8080", "vhost.example", "10.0.0.1:8080"]


def test_a_retry_that_cannot_be_picked_raises_the_refused_attempts_error(make: Callable[..., BalancedTransport]) -> None:
    # As polylbhttp's WithRetries: the set emptied while the refused attempt was in flight
    # leaves the request its own error, not NoEndpointsError (nothing more could be tried).
    holder: Dict[str, BalancedTransport] = {}

    def refuse(request: httpx.Request) -> httpx.Response:
        holder["transport"].update([])
        raise httpx.ConnectError("connection refused", request=request)

    transport = make("random", ["http://10.0.0.1:8080", "http://10.0.0.2:8080"], transport=httpx.MockTransport(refuse), retries=1)
    holder["transport"] = transport
    with client(transport) as http, pytest.raises(httpx.ConnectError) as info:
        http.get("/who")
    assert not isinstance(info.value, NoEndpointsError)
    assert str(info.value) == "connection refused"


@pytest.mark.parametrize("strategy", ["consistenthash", "boundedhash", "maglev", "rendezvous"])
def test_a_hashing_strategy_without_a_key_is_refused(strategy: str, servers: Dict[int, Server]) -> None:
    # Every request would hash the empty key to one endpoint: refused, as polylbhttp and
    # polylb-spring refuse it; a balancer of yours is left open.
    urls = [servers[1].url, servers[2].url]
    for factory in (BalancedTransport, AsyncBalancedTransport):
        with pytest.raises(ValueError, match=f"loadbalance={strategy} .* no hash_key"):
            factory(strategy, urls)
        with Balancer(strategy) as mine:
            with pytest.raises(ValueError, match="no hash_key"):
                factory(mine, urls)
            assert mine.stats()["strategy"] == strategy  # still open
    BalancedTransport(strategy, urls, hash_key=lambda request: None).close()
    BalancedTransport("random", urls).close()  # needs no key
