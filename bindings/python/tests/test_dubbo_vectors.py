"""Apache Dubbo's own outputs (tests/vectors/*.json, ../shared/vectors/*.json beside the
checkout, $POLYLB_VECTORS), reproduced through Python."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

import pytest

import polylb
from conftest import by_id

FROZEN_NOW_US = 1_700_000_000_000 * 1000  # every select at the same millisecond, as the vectors


def _section(vectors: Dict[str, Any], name: str) -> Dict[str, Any]:
    """One section of a vector file; a file without it has nothing of that kind to check."""
    if name not in vectors:
        pytest.skip(f"no {name} section in this vector file")
    section: Dict[str, Any] = vectors[name]
    return section


def _cases(vectors: Dict[str, Any]) -> List[Dict[str, Any]]:
    cases: List[Dict[str, Any]] = _section(vectors, "consistent_hash")["cases"]
    return cases


def _round_robin_balancer(balancer_factory: Any, weights: List[int]) -> Any:
    """Round robin over providers 0..n-1 (ids are the 0-based indices, so a select's result
    compares directly with the vector) of these URL weights: Dubbo's getWeight clamps a negative
    weight to 0, as the adapters do (polylb rejects it)."""
    lb = balancer_factory(config="loadbalance=roundrobin")
    lb.update(
        [
            polylb.Invoker(id=i, address=f"10.0.0.{i + 1}:20880", weight=max(weight, 0))
            for i, weight in enumerate(weights)
        ]
    )
    return lb


def _hash_argument_indexes(text: str) -> Optional[List[int]]:
    """Dubbo's reading of `hash.arguments`: split on commas with the blanks around them
    (trailing empty pieces dropped, as Java's split does), each piece a Java int; None where
    Dubbo throws."""
    # Java's \s is ASCII's six blanks (re.ASCII's); trailing empty pieces go only from a split
    # that matched, all of them: "," gives no index (the empty key), "" stays "" (and throws).
    pieces = re.split(r"\s*,+\s*", text, flags=re.ASCII)
    if len(pieces) > 1:
        while pieces and pieces[-1] == "":
            pieces.pop()
    if not all(re.fullmatch(r"[+-]?[0-9]+", piece) for piece in pieces):
        return None
    indexes = [int(piece) for piece in pieces]
    if any(not -(2**31) <= i < 2**31 for i in indexes):
        return None
    return indexes


def _dubbo_key(args: List[str], indexes: List[int]) -> str:
    """The key Dubbo hashes: the named arguments that exist, concatenated."""
    return "".join(args[i] for i in indexes if 0 <= i < len(args))


def test_hash_arguments_are_read_as_dubbo_reads_them() -> None:
    assert _hash_argument_indexes("0") == [0]
    assert _hash_argument_indexes("0 , 1,,2") == [0, 1, 2]
    assert _hash_argument_indexes("0,,") == [0]
    assert _hash_argument_indexes("-1,+1") == [-1, 1]
    assert _hash_argument_indexes("0,\x0b1") == [0, 1]
    for none in [",", ",,", " , "]:
        assert _hash_argument_indexes(none) == [], none
    for throws in ["x", " 0", "0 ", ",0", "0, ,1", "", "0,\u00a01", "2147483648"]:
        assert _hash_argument_indexes(throws) is None, throws
    assert _dubbo_key(["user-3", "9"], [0, 1]) == "user-39"
    assert _dubbo_key(["k"], [0, 0]) == "kk"
    assert _dubbo_key(["k"], [1, -1]) == ""


def test_consistent_hash_cases(dubbo_vectors: Dict[str, Any], balancer_factory: Any) -> None:
    cases = _cases(dubbo_vectors)
    shared_keys: List[str] = dubbo_vectors["consistent_hash"].get("keys", [])
    assert cases
    for case in cases:
        name = case.get("name", "?")
        keys: List[str] = case.get("keys", shared_keys)
        # Each key is the call's single argument; the caller hashes what hash.arguments names
        # (polylb hashes the key it is given, as the adapters build it).
        indexes = _hash_argument_indexes(case.get("hash_arguments", "0"))
        assert indexes is not None, f"{name}: hash.arguments makes Dubbo throw"
        lb = balancer_factory(config=f"loadbalance=consistenthash&hash.nodes={case.get('hash_nodes', 160)}")
        if "providers" in case:
            phases = [(case["providers"], case["picks"])]
        else:  # a before/after pair on one balancer (a removal)
            phases = [
                (case["providers_before"], case["picks_before"]),
                (case["providers_after"], case["picks_after"]),
            ]
        for providers, expected in phases:
            lb.update([polylb.Invoker(id=i + 1, address=address) for i, address in enumerate(providers)])
            address_of = {i + 1: address for i, address in enumerate(providers)}
            assert len(expected) == len(keys), f"{name}: picks per key"
            picks = [address_of[lb.select(key=_dubbo_key([key], indexes).encode("utf-8"))] for key in keys]
            mismatches = [(key, got, want) for key, got, want in zip(keys, picks, expected) if got != want]
            assert not mismatches, f"{name}: (key, polylb, dubbo) {mismatches[:5]}"


def test_round_robin_sequences(dubbo_vectors: Dict[str, Any], balancer_factory: Any) -> None:
    sequences = _section(dubbo_vectors, "round_robin").get("sequences", [])
    for sequence in sequences:
        weights: List[int] = sequence["weights"]
        lb = _round_robin_balancer(balancer_factory, weights)
        picks = [lb.select(now_us=FROZEN_NOW_US) for _ in sequence["picks"]]
        assert picks == sequence["picks"], f"weights {weights}"


def _long_sequence(sequence: Dict[str, Any]) -> List[int]:
    """One of round_robin.long_sequences, read as the Rust harness reads it (the public file
    shows no example): the one array of integer pairs [position, index] whose pick is not index
    0, and the length (the one other integer field, else the last pair's position + 1)."""
    pairs: List[List[int]] = next(
        (
            field
            for name, field in sequence.items()
            if name != "weights"
            and isinstance(field, list)
            and field
            and all(isinstance(p, list) and len(p) == 2 for p in field)
        ),
        [],
    )
    lengths = [
        field
        for name, field in sequence.items()
        if name != "weights" and isinstance(field, int) and not isinstance(field, bool)
    ]
    length = lengths[0] if lengths else max((p[0] + 1 for p in pairs), default=0)
    want = [0] * length
    for position, index in pairs:
        want[position] = index
    return want


def test_round_robin_long_sequences(dubbo_vectors: Dict[str, Any], balancer_factory: Any) -> None:
    for sequence in _section(dubbo_vectors, "round_robin").get("long_sequences", []):
        weights: List[int] = sequence["weights"]
        want = _long_sequence(sequence)
        lb = _round_robin_balancer(balancer_factory, weights)
        picks = [lb.select(now_us=FROZEN_NOW_US) for _ in want]
        first = next((k for k, (got, w) in enumerate(zip(picks, want)) if got != w), None)
        assert first is None, f"weights {weights}, pick {first}: {picks[first]}, Dubbo {want[first]}"


def _dubbo_to_polylb(entry: Dict[str, Any]) -> Dict[str, int]:
    weight = 100 if entry["weight"] is None else max(entry["weight"], 0)  # Dubbo clamps at 0
    start_time_ms = 0 if entry["timestamp_ms"] is None else entry["timestamp_ms"]
    if entry["warmup_ms"] is None:
        warmup_ms = -1  # polylb: the balancer's default (Dubbo's 600000)
    else:
        # Dubbo: warmup <= 0 means no warm-up; polylb reads a negative warmup as "default".
        warmup_ms = max(entry["warmup_ms"], 0)
    return {"weight": weight, "start_time_ms": start_time_ms, "warmup_ms": warmup_ms}


def test_warmup_weights(dubbo_vectors: Dict[str, Any], balancer_factory: Any) -> None:
    warmup = _section(dubbo_vectors, "warmup")
    entries: List[Dict[str, Any]] = warmup["via_getWeight"]
    assert entries
    lb = balancer_factory()
    lb.update(
        [
            polylb.Invoker(id=i, address=f"10.0.0.{i % 250 + 1}:20880", **_dubbo_to_polylb(entry))
            for i, entry in enumerate(entries)
        ]
    )
    rows = by_id(lb.stats(now_us=warmup["now_ms"] * 1000))
    mismatches = [
        (entry, rows[i]["effective_weight"])
        for i, entry in enumerate(entries)
        if rows[i]["effective_weight"] != entry["expected"]
    ]
    assert not mismatches, "\n".join(f"{e} -> polylb {got}" for e, got in mismatches)


@pytest.mark.parametrize("removed", [1, 3])
def test_subset_ring_equals_smaller_ring(dubbo_vectors: Dict[str, Any], balancer_factory: Any, removed: int) -> None:
    """A candidate subset answers as a ring built from the subset would (DESIGN.md)."""
    keys: List[str] = _section(dubbo_vectors, "consistent_hash")["keys"]
    providers = [f"10.0.0.{n}:20880" for n in range(1, 6)]
    whole = balancer_factory("consistenthash")
    whole.update([polylb.Invoker(i + 1, a) for i, a in enumerate(providers)])
    smaller = balancer_factory("consistenthash")
    smaller.update([polylb.Invoker(i + 1, a) for i, a in enumerate(providers) if i + 1 != removed])
    among = [i for i in range(1, 6) if i != removed]
    for key in keys:
        assert whole.select(key=key, among=among) == smaller.select(key=key)
        assert whole.select(key=key, exclude=[removed]) == smaller.select(key=key)
