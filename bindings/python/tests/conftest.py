"""Shared fixtures. Tests import ``polylb`` as installed (``pip install ./bindings/python``); this
directory has no ``__init__.py``, so pytest does not put the package's source tree on sys.path."""

from __future__ import annotations

import bisect
import hashlib
import heapq
import json
import math
import os
from fractions import Fraction
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple, Union

import pytest

import polylb

TESTS_DIR = Path(__file__).resolve().parent
PYTHON_DIR = TESTS_DIR.parent
REPO_ROOT = PYTHON_DIR.parent.parent


def vector_files() -> List[Path]:
    """The Dubbo vector files: every *.json in the repository's copy (tests/vectors) and in the
    shared folder beside the checkout (where a larger set may be dropped), and $POLYLB_VECTORS (a
    file or a directory), as the Rust and Go harnesses read them."""
    found: List[Path] = []
    places = [REPO_ROOT / "tests" / "vectors", REPO_ROOT.parent / "shared" / "vectors"]
    override = os.environ.get("POLYLB_VECTORS")
    if override:
        places.append(Path(override))
    for place in places:
        if place.is_dir():
            candidates = sorted(place.glob("*.json"))
        elif place.is_file():
            candidates = [place]
        elif place == Path(override or ""):
            candidates = [place]  # missing: the fixture fails naming it
        else:
            continue
        for path in candidates:
            if path.resolve() not in [f.resolve() for f in found]:
                found.append(path)
    return found or [places[0] / "dubbo-public.json"]


@pytest.fixture(scope="session", params=vector_files(), ids=lambda path: path.name)
def dubbo_vectors(request: Any) -> Dict[str, Any]:
    path: Path = request.param
    if not path.is_file():
        pytest.fail(f"Dubbo vectors not found at {path} (set POLYLB_VECTORS to a JSON file or directory)")
    with path.open(encoding="utf-8") as handle:
        data: Dict[str, Any] = json.load(handle)
    return data


def invokers(n: int, weights: List[int] | None = None) -> List[polylb.Invoker]:
    """Invokers 1..n at 10.0.0.N:20880, as in the Dubbo vectors."""
    weights = weights or [100] * n
    return [
        polylb.Invoker(id=i + 1, address=f"10.0.0.{i + 1}:20880", weight=weights[i]) for i in range(n)
    ]


def assert_config_error_naming(config: str, names: str) -> None:
    """Balancer(config=config) raises ConfigError (INVALID_CONFIG) whose message contains names."""
    with pytest.raises(polylb.ConfigError) as info:
        polylb.Balancer(config=config)
    assert info.value.status == polylb.Status.INVALID_CONFIG
    assert names in info.value.message, info.value.message


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


_M64 = (1 << 64) - 1


def stable_hash64(data: bytes, seed: int) -> int:
    """The stable 64-bit hash of maglev and rendezvous as src/strategy/stable_hash.rs documents it
    (written out here, not taken from the library): 8-byte little-endian words, the last zero-padded, each folded in by a
    multiply and a rotate, the length in the seed, then murmur3's 64-bit finalizer."""
    k1, k2 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F
    h = seed ^ ((len(data) * k1) & _M64)
    for start in range(0, len(data), 8):
        word = int.from_bytes(data[start : start + 8].ljust(8, b"\0"), "little")
        h ^= (word * k2) & _M64
        h = ((h << 27) | (h >> 37)) & _M64
        h = (h * k1) & _M64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    return h ^ (h >> 33)


def maglev_reference(invokers: List[polylb.Invoker], size: int = 65537) -> Any:
    """Weighted Maglev as the maglev strategy's module doc specifies it: each address has an
    offset and a skip in a table of ``size`` (a prime) slots; invokers take turns claiming the
    first free slot of their list ``offset, offset + skip, ...``, the k-th turn of an invoker of
    weight w due at k / w (ties in address order, then set order); weight 0 owns nothing unless
    every weight is 0. A key reads slot ``hash · size / 2^64``; when its owner is not a candidate
    the pick is the owner of the next slot (wrapping) a candidate owns (the library looks at
    most 4096 slots ahead before it falls back, which candidates owning a sizeable share never
    need). Returns ``owner(key, candidates=None) -> id``."""
    key_seed, offset_seed, skip_seed = 0x6D61676C65766B65, 0x6D61676C65766F66, 0x6D61676C6576736B
    all_zero = all(invoker.weight <= 0 for invoker in invokers)
    order = sorted(
        (position for position, invoker in enumerate(invokers) if all_zero or invoker.weight > 0),
        key=lambda position: (invokers[position].address.encode(), position),
    )
    weights = [1 if all_zero else invokers[position].weight for position in order]
    following = [stable_hash64(invokers[p].address.encode(), offset_seed) % size for p in order]
    skips = [stable_hash64(invokers[p].address.encode(), skip_seed) % (size - 1) + 1 for p in order]
    slots: List[int] = [-1] * size
    turns = [(Fraction(1, weight), rank, 1) for rank, weight in enumerate(weights)]
    heapq.heapify(turns)
    for _ in range(size):
        _, rank, k = heapq.heappop(turns)
        while slots[following[rank]] != -1:
            following[rank] = (following[rank] + skips[rank]) % size
        slots[following[rank]] = invokers[order[rank]].id
        following[rank] = (following[rank] + skips[rank]) % size
        heapq.heappush(turns, (Fraction(k + 1, weights[rank]), rank, k + 1))

    def owner(key: str, candidates: Any = None) -> int:
        slot = (stable_hash64(key.encode(), key_seed) * size) >> 64
        for step in range(size):
            owned = slots[(slot + step) % size]
            if candidates is None or owned in candidates:
                return owned
        raise AssertionError("no candidate owns a slot")

    owner.slots = slots  # type: ignore[attr-defined]
    return owner


def mix64(z: int) -> int:
    """SplitMix64's finaliser, as src/strategy/stable_hash.rs documents it."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def rendezvous_reference(invokers: List[polylb.Invoker]) -> Any:
    """Weighted rendezvous as the rendezvous strategy's module doc specifies it: for a key, each
    candidate scores ``h = mix64(hash64(address, "rendezad") ^ hash64(key, "rendezky"))`` (seeds
    as big-endian ASCII), ``u = ((h >> 12) + 0.5) / 2**52``; the lowest ``-ln(u) / weight`` wins,
    equal ones going to the higher ``h``, then to the earlier position. Weight 0 (or less) wins
    only when no candidate weighs more, and then all count as weight 1. Returns
    ``owner(key, candidates=None) -> id`` (``candidates``: ids, default all)."""
    key_seed = int.from_bytes(b"rendezky", "big")
    address_seed = int.from_bytes(b"rendezad", "big")
    address_hashes = [
        stable_hash64(
            invoker.address.encode() if isinstance(invoker.address, str) else invoker.address, address_seed
        )
        for invoker in invokers
    ]

    def owner(key: Union[str, bytes], candidates: Any = None) -> int:
        key_hash = stable_hash64(key.encode() if isinstance(key, str) else key, key_seed)
        chosen = [p for p, invoker in enumerate(invokers) if candidates is None or invoker.id in candidates]
        weighed = [p for p in chosen if invokers[p].weight > 0] or chosen

        def rank(position: int) -> Tuple[float, int, int]:
            h = mix64(address_hashes[position] ^ key_hash)
            u = ((h >> 12) + 0.5) / 2**52
            return (-math.log(u) / max(invokers[position].weight, 1), -h, position)

        return invokers[min(weighed, key=rank)].id

    return owner
