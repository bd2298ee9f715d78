"""Per-request cost of polylb.httpx's transports against plain httpx, for a tiny GET.

    POLYLB_LIBRARY=target/release/libpolylb.so python3 bindings/python/bench_httpx.py [--requests N] [--rounds R]

Rows, timed in interleaved rounds of N requests each, one at a time (wall time), the median per
request over the rounds:

- a local server (``http.server``, HTTP/1.1 keep-alive, in this process: its share is in every
  row alike): ``httpx.Client`` with a plain ``httpx.HTTPTransport``, and with a
  ``BalancedTransport`` (``roundrobin``) over it to the same server;
- the transport's own work: the same two over a stand-in, ``httpx.MockTransport``, that answers
  at once with a 2-byte body (what is left is httpx's client and the adapter: pick, routed
  request, wrapped body, report); the same for ``httpx.AsyncClient`` with async transports;
- the transports alone, without a client: ``handle_request`` of a built request and reading
  its body, a plain MockTransport against a BalancedTransport over one (the least noisy
  measure of the adapter's own work).

The difference of each pair is what balancing adds per request.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List

import httpx

from polylb.httpx import AsyncBalancedTransport, BalancedTransport


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b"ok")


def sync_row(client: httpx.Client, n: int) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        for _ in range(n):
            client.get("/x").read()
        return (time.perf_counter() - started) / n

    return run


def async_row(client: httpx.AsyncClient, n: int, loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    async def requests() -> None:
        for _ in range(n):
            await client.get("/x")

    def run() -> float:
        started = time.perf_counter()
        loop.run_until_complete(requests())
        return (time.perf_counter() - started) / n

    return run


def transport_row(transport: httpx.BaseTransport, n: int) -> Callable[[], float]:
    request = httpx.Request("GET", "http://svc/x?a=1", headers={"accept": "*/*"})

    def run() -> float:
        started = time.perf_counter()
        for _ in range(n):
            response = transport.handle_request(request)
            response.read()
            response.close()
        return (time.perf_counter() - started) / n

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    loop = asyncio.new_event_loop()

    clients = {
        "server: plain HTTPTransport": httpx.Client(base_url=url),
        "server: BalancedTransport": httpx.Client(transport=BalancedTransport("roundrobin", [url]), base_url="http://svc"),
        "stand-in: plain MockTransport": httpx.Client(transport=httpx.MockTransport(answer), base_url=url),
        "stand-in: BalancedTransport": httpx.Client(
            transport=BalancedTransport("roundrobin", [url], transport=httpx.MockTransport(answer)), base_url="http://svc"
        ),
    }
    async_clients = {
        "async stand-in: plain MockTransport": httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url=url),
        "async stand-in: AsyncBalancedTransport": httpx.AsyncClient(
            transport=AsyncBalancedTransport("roundrobin", [url], transport=httpx.MockTransport(answer)),
            base_url="http://svc",
        ),
    }
    rows: Dict[str, Callable[[], float]] = {name: sync_row(c, args.requests) for name, c in clients.items()}
    rows.update({name: async_row(c, args.requests, loop) for name, c in async_clients.items()})
    balanced_alone = BalancedTransport("roundrobin", [url], transport=httpx.MockTransport(answer))
    rows["transport alone: MockTransport"] = transport_row(httpx.MockTransport(answer), args.requests)
    rows["transport alone: BalancedTransport"] = transport_row(balanced_alone, args.requests)
    for run in rows.values():
        run()  # warm up: connections, caches
    times: Dict[str, List[float]] = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, run in rows.items():
            times[name].append(run())
    median = {name: statistics.median(values) * 1e6 for name, values in times.items()}
    for name, value in median.items():
        print(f"{name:42s} {value:8.1f} µs")
    for plain, balanced in [
        ("server: plain HTTPTransport", "server: BalancedTransport"),
        ("stand-in: plain MockTransport", "stand-in: BalancedTransport"),
        ("async stand-in: plain MockTransport", "async stand-in: AsyncBalancedTransport"),
        ("transport alone: MockTransport", "transport alone: BalancedTransport"),
    ]:
        print(f"{balanced} - {plain}: {median[balanced] - median[plain]:+.1f} µs per request")
    for client in clients.values():
        client.close()
    for async_client in async_clients.values():
        loop.run_until_complete(async_client.aclose())
    balanced_alone.close()
    server.shutdown()


if __name__ == "__main__":
    main()
