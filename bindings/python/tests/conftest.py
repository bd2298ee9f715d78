"""Shared fixtures. Tests import ``polylb`` as installed (``pip install ./bindings/python``); this
directory has no ``__init__.py``, so pytest does not put the package's source tree on sys.path."""

from __future__ import annotations

import bisect
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import polylb

TESTS_DIR = Path(__file__).resolve().parent
PYTHON_DIR = TESTS_DIR.parent
REPO_ROOT = PYTHON_DIR.parent.parent


def vectors_path() -> Path:
    """The public Dubbo vectors: the repository's copy (tests/vectors), else shared/ beside it."""
    override = os.environ.get("POLYLB_VECTORS")
    if override:
        return Path(override)
    in_repo = REPO_ROOT / "tests" / "vectors" / "dubbo-public.json"
    if in_repo.is_file():
        return in_repo
    return REPO_ROOT.parent / "shared" / "vectors" / "dubbo-public.json"


@pytest.fixture(scope="session")
def dubbo_vectors() -> Dict[str, Any]:
    path = vectors_path()
    if not path.is_file():
        pytest.fail(f"Dubbo vectors not found at {path} (set POLYLB_VECTORS to the JSON file)")
    with path.open(encoding="utf-8") as handle:
        data: Dict[str, Any] = json.load(handle)
    return data


def invokers(n: int, weights: List[int] | None = None) -> List[polylb.Invoker]:
    """Invokers 1..n at 10.0.0.N:20880, as in the Dubbo vectors."""
    weights = weights or [100] * n
    return [
        polylb.Invoker(id=i + 1, address=f"10.0.0.{i + 1}:20880", weight=weights[i]) for i in range(n)
    ]


@pytest.fixture
def balancer_factory() -> Iterator[Any]:
    """Creates balancers and closes them all at the end of the test."""
    made: List[polylb.Balancer] = []

    def make(*args: Any, **kwargs: Any) -> polylb.Balancer:
        balancer = polylb.Balancer(*args, **kwargs)
        made.append(balancer)
        return balancer

    yield make
    for balancer in made:
        balancer.close()


def by_id(stats: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    return {row["id"]: row for row in stats["invokers"]}


def dubbo_ring(addresses: Dict[int, str], nodes: int = 160) -> Any:
    """Dubbo's ConsistentHashLoadBalance rule, written out independently of the library: each
    address puts nodes/4 MD5 digests of ``address + str(i)`` on the ring, four little-endian
    32-bit points per digest (a later invoker's point wins a collision); a key lands on the
    first point at or after the first little-endian word of MD5(key), wrapping around."""
    ring: Dict[int, int] = {}
    for invoker_id, address in addresses.items():
        for i in range(nodes // 4):
            digest = hashlib.md5(f"{address}{i}".encode()).digest()
            for h in range(4):
                ring[int.from_bytes(digest[4 * h : 4 * h + 4], "little")] = invoker_id
    points = sorted(ring)

    def owner(key: str) -> int:
        point = int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "little")
        at = bisect.bisect_left(points, point)
        return ring[points[at % len(points)]]

    def share(invoker_id: int) -> float:
        """The fraction of the 2^32 key space whose keys land on invoker_id's points."""
        owned = 0
        for k, point in enumerate(points):
            if ring[point] == invoker_id:
                previous = points[k - 1] if k else points[-1] - 2**32
                owned += point - previous
        return owned / 2**32

    owner.share = share  # type: ignore[attr-defined]
    return owner
