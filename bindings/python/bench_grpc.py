"""Per-call cost of polylb.grpc.BalancedChannel against plain grpcio, for a tiny unary call.

    POLYLB_LIBRARY=target/release/libpolylb.so python3 bindings/python/bench_grpc.py [--calls N] [--rounds R]

Three in-process grpcio servers on 127.0.0.1 answer ``/bench/Echo`` with its request (a few
bytes, no protoc). Rows, timed in interleaved rounds of N blocking calls each (wall time; the
servers run in this process, so their share is in every row alike and cancels out of the
differences): a plain channel to one server; grpcio's own ``round_robin`` over the three (one
channel, the addresses as an ``ipv4:`` target); BalancedChannel over the one server and over the
three (``roundrobin``). Prints the median per-call time of each row over the rounds, and each
row's difference from the plain channel: what balancing adds per call. Then the same for
grpc.aio: a plain grpc.aio channel and polylb.grpc.aio's BalancedChannel, each to one server,
awaited one call at a time on one event loop, and its own work against a stand-in call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from concurrent import futures
from typing import Any, Callable, Dict, List

import grpc
import grpc.aio

from polylb import Balancer, Invoker
from polylb.grpc import BalancedChannel, Endpoint
from polylb.grpc import aio as balanced_aio


def serve() -> Any:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    echo = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench", {"Echo": echo}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


class _Instant:
    """A stand-in grpc channel whose calls answer at once: what remains is BalancedChannel's own
    work per call (pick, count, dispatch, report), without the network's noise."""

    def unary_unary(self, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        return lambda request, **options: request

    def close(self) -> None:
        pass


def own_work(calls: int, rounds: int) -> None:
    direct = _Instant().unary_unary("/bench/Echo")
    balanced = BalancedChannel(Balancer("roundrobin"), channel_factory=lambda target: _Instant())
    balanced.update([Invoker(i, f"10.0.0.{i}:50051") for i in (1, 2, 3)])
    through = balanced.unary_unary("/bench/Echo")
    samples: Dict[str, List[float]] = {"direct": [], "balanced": []}
    for _ in range(rounds):
        for name, call in (("direct", direct), ("balanced", through)):
            start = time.perf_counter()
            for _ in range(calls * 10):
                call(b"ping", timeout=10)
            samples[name].append((time.perf_counter() - start) / (calls * 10) * 1e6)
    direct_us, balanced_us = (statistics.median(samples[name]) for name in ("direct", "balanced"))
    print(f"| BalancedChannel's own work (a channel that answers at once) | {balanced_us - direct_us:.2f} | |")


class _InstantAioCall:
    """A stand-in grpc.aio call that has already answered: awaiting it gives the request back,
    its done callbacks run at once, its status is OK."""

    def __init__(self, request: Any) -> None:
        self._request = request

    def __await__(self) -> Any:
        return self._request
        yield  # pragma: no cover - a generator: awaiting it returns at once

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        callback(self)

    async def code(self) -> Any:
        return grpc.StatusCode.OK

    async def details(self) -> str:
        return ""


class _InstantAio:
    def unary_unary(self, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        return lambda request, **options: _InstantAioCall(request)

    async def close(self, grace: Any = None) -> None:
        pass


async def aio_rows(address: str, calls: int, rounds: int) -> None:
    plain = grpc.aio.insecure_channel(address)
    one = balanced_aio.BalancedChannel(Balancer("roundrobin"))
    one.update([Endpoint(Invoker(1, address))])
    instant = balanced_aio.BalancedChannel(Balancer("roundrobin"), channel_factory=lambda target: _InstantAio())
    instant.update([Invoker(i, f"10.0.0.{i}:50051") for i in (1, 2, 3)])
    direct = _InstantAio().unary_unary("/bench/Echo")
    rows: Dict[str, Callable[..., Any]] = {
        "grpc.aio channel, one server": plain.unary_unary("/bench/Echo"),
        "aio BalancedChannel, one server": one.unary_unary("/bench/Echo"),
        "stand-in call": direct,
        "aio BalancedChannel over stand-in calls": instant.unary_unary("/bench/Echo"),
    }
    for name, call in rows.items():
        for _ in range(200):
            assert await call(b"ping", timeout=10) == b"ping", name
    per_call: Dict[str, List[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, call in rows.items():
            repeat = calls if "server" in name else calls * 10
            start = time.perf_counter()
            for _ in range(repeat):
                await call(b"ping", timeout=10)
            per_call[name].append((time.perf_counter() - start) / repeat * 1e6)
    median = {name: statistics.median(samples) for name, samples in per_call.items()}
    baseline = median["grpc.aio channel, one server"]
    for name in ("grpc.aio channel, one server", "aio BalancedChannel, one server"):
        print(f"| {name} | {median[name]:.1f} | {median[name] - baseline:+.1f} |")
    own = median["aio BalancedChannel over stand-in calls"] - median["stand-in call"]
    print(f"| aio BalancedChannel's own work (a call that answers at once) | {own:.2f} | |")
    await plain.close()
    await one.close()
    await instant.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    arguments = parser.parse_args()
    started = [serve() for _ in range(3)]
    addresses = [address for _, address in started]

    plain = grpc.insecure_channel(addresses[0])
    round_robin = grpc.insecure_channel(
        "ipv4:" + ",".join(addresses), options=[("grpc.lb_policy_name", "round_robin")]
    )
    one = BalancedChannel(Balancer("roundrobin"))
    one.update([Endpoint(Invoker(1, addresses[0]))])
    three = BalancedChannel(Balancer("roundrobin"))
    three.update([Endpoint(Invoker(i, address)) for i, address in enumerate(addresses, 1)])
    rows: Dict[str, Any] = {
        "grpcio channel, one server": plain,
        "grpcio round_robin, three servers": round_robin,
        "BalancedChannel, one server": one,
        "BalancedChannel roundrobin, three servers": three,
    }
    calls: Dict[str, Callable[..., Any]] = {name: ch.unary_unary("/bench/Echo") for name, ch in rows.items()}
    for name, call in calls.items():  # connected, and warm, before anything is timed
        for _ in range(200):
            assert call(b"ping", timeout=10) == b"ping", name
    per_call: Dict[str, List[float]] = {name: [] for name in rows}
    for _ in range(arguments.rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(arguments.calls):
                call(b"ping", timeout=10)
            per_call[name].append((time.perf_counter() - start) / arguments.calls * 1e6)
    baseline = statistics.median(per_call["grpcio channel, one server"])
    print(f"{arguments.rounds} rounds x {arguments.calls} calls, median µs per call (wall time)")
    print(f"| what | µs per call | vs the plain channel |\n|---|---:|---:|")
    for name, samples in per_call.items():
        median = statistics.median(samples)
        print(f"| {name} | {median:.1f} | {median - baseline:+.1f} |")
    own_work(arguments.calls, arguments.rounds)
    asyncio.run(aio_rows(addresses[0], arguments.calls, arguments.rounds))
    for channel in rows.values():
        channel.close()
    for server, _ in started:
        server.stop(None)


if __name__ == "__main__":
    main()
