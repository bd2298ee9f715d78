"""The transport's endpoints: one polylb invoker per endpoint URL, its id fixed by the URL."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

from .._invoker import Invoker
from ._routing import Target, target_of


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
            parsed.append((endpoint, target_of(endpoint.url)))
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
