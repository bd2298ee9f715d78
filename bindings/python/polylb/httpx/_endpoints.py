"""The transport's endpoints: one polylb invoker per endpoint URL, its id fixed by the URL."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import httpx

from .._invoker import Invoker


@dataclass(frozen=True)
class Endpoint:
    """One HTTP provider: ``url`` is its origin (``"http://10.0.0.1:8080"``: scheme, host and
    port; no path, query or credentials), ``weight``, ``zone``, ``start_time_ms`` and
    ``warmup_ms`` are its polylb invoker's (see :class:`polylb.Invoker`)."""

    url: str
    weight: int = 100
    zone: Optional[str] = None
    start_time_ms: int = 0
    warmup_ms: int = -1


@dataclass(frozen=True)
class Target:
    """Where a picked id sends its requests: the parts of the request URL it replaces, and the
    ``Host`` header a request sent straight to it would carry."""

    url: str
    scheme: str
    host: str
    port: Optional[int]
    authority: str


def _target(url: str) -> Target:
    if not isinstance(url, str):
        raise TypeError(f"an endpoint's url must be a str, not {type(url).__name__}")
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"endpoint {url!r} is not an absolute http or https URL")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment or parsed.userinfo:
        # The request keeps its own path and query; a prefix here would be silently dropped.
        raise ValueError(f"endpoint {url!r} must be an origin (scheme://host[:port]) with no path, query or credentials")
    authority = parsed.netloc.decode("ascii")
    return Target(f"{parsed.scheme}://{authority}", parsed.scheme, parsed.host, parsed.port, authority)


class Endpoints:
    """Ids by URL and targets by id. An id, once given to a URL, is that URL's for the
    transport's life and its target never changes, so a request that picked from a set an update
    has just replaced still finds where to go, with no lock on the request's path. The cost is an
    entry per URL ever seen (a few hundred bytes each)."""

    def __init__(self) -> None:
        self._ids: Dict[str, int] = {}
        self._targets: Dict[int, Target] = {}
        self._lock = threading.Lock()  # giving out ids; requests only read _targets

    def target(self, id: int) -> Target:
        return self._targets[id]

    def invokers(self, endpoints: Sequence[Union[Endpoint, str]]) -> List[Invoker]:
        """The invokers of ``endpoints`` (a str is an Endpoint of that URL), giving ids to URLs
        new to the transport. An invoker's address is the endpoint's ``host:port``: the hashing
        strategies place it as an RPC client of the same providers would."""
        parsed: List[Tuple[Endpoint, Target]] = []
        for endpoint in endpoints:
            endpoint = Endpoint(endpoint) if isinstance(endpoint, str) else endpoint
            if not isinstance(endpoint, Endpoint):
                raise TypeError(f"an endpoint is an Endpoint or a URL string, not {type(endpoint).__name__}")
            parsed.append((endpoint, _target(endpoint.url)))
        invokers = []
        with self._lock:
            for endpoint, target in parsed:
                id = self._ids.get(target.url)
                if id is None:
                    id = len(self._ids) + 1
                    self._targets[id] = target  # before the balancer can pick the id
                    self._ids[target.url] = id
                port = target.port if target.port is not None else (443 if target.scheme == "https" else 80)
                invokers.append(
                    Invoker(
                        id=id,
                        address=f"[{target.host}]:{port}" if ":" in target.host else f"{target.host}:{port}",
                        weight=endpoint.weight,
                        start_time_ms=endpoint.start_time_ms,
                        warmup_ms=endpoint.warmup_ms,
                        zone=endpoint.zone,
                    )
                )
        return invokers
