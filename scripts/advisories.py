#!/usr/bin/env python3
"""The crates of the project's lockfiles against RustSec's advisory database.

    git clone https://github.com/rustsec/advisory-db /tmp/advisory-db
    python3 scripts/advisories.py /tmp/advisory-db

Prints each advisory whose patched and unaffected ranges leave out a locked version (withdrawn
advisories skipped), and exits 1 if one concerns Cargo.lock (what the library, the JNI library
and the tests build); fuzz/ and bench/rust-peers/ are reported but not counted (tools, never
shipped). `cargo audit` does the same for one lockfile where it is installed.
"""
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCKS = {"Cargo.lock": True, "fuzz/Cargo.lock": False, "bench/rust-peers/Cargo.lock": False,
         "integrations/tower/Cargo.lock": False}


def version(v):
    core, _, pre = v.split("+")[0].partition("-")
    parts = [int(x) for x in core.split(".")] + [0, 0]
    # a pre-release sorts before its release
    return tuple(parts[:3]) + ((0,) if pre else (1,))


def satisfies(v, requirement):
    """Cargo's comparison operators, comma = and; a bare version is a caret requirement."""
    a = version(v)
    for clause in (c.strip() for c in requirement.split(",")):
        m = re.fullmatch(r"(>=|<=|>|<|=|\^|~)?\s*(\d+(?:\.\d+){0,2}(?:-[\w.]+)?)", clause)
        if not m:
            raise ValueError(f"unknown requirement {requirement!r}")
        op, rv = m.group(1) or "^", m.group(2)
        b, given = version(rv), len(rv.split("-")[0].split("."))
        if op == "^":
            if b[0] > 0 or given == 1:
                upper = (b[0] + 1, 0, 0, 0)
            elif b[1] > 0 or given == 2:
                upper = (0, b[1] + 1, 0, 0)
            else:
                upper = (0, 0, b[2] + 1, 0)
            ok = b <= a < upper
        elif op == "~":
            upper = (b[0], b[1] + 1, 0, 0) if given > 1 else (b[0] + 1, 0, 0, 0)
            ok = b <= a < upper
        else:
            ok = {">=": a >= b, ">": a > b, "<": a < b, "<=": a <= b, "=": a[:3] == b[:3]}[op]
        if not ok:
            return False
    return True


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    db = pathlib.Path(sys.argv[1]) / "crates"
    locked = {}
    for lock, shipped in LOCKS.items():
        for p in tomllib.loads((ROOT / lock).read_text())["package"]:
            locked.setdefault(p["name"], []).append((p["version"], lock, shipped))
    found = counted = 0
    for path in sorted(db.glob("*/*.md")):
        if path.parent.name not in locked:
            continue
        front, _, body = path.read_text().split("```toml", 1)[1].partition("```")
        adv = tomllib.loads(front)
        title = next((l[2:] for l in body.splitlines() if l.startswith("# ")), "")
        a, ranges = adv["advisory"], adv.get("versions", {})
        if a.get("withdrawn"):
            continue
        safe = ranges.get("patched", []) + ranges.get("unaffected", [])
        for v, lock, shipped in locked.get(a["package"], []):
            if not any(satisfies(v, r) for r in safe):
                kind = a.get("informational", "vulnerability")
                print(f"{a['id']} {a['package']} {v} in {lock} ({kind}): {title.strip()}")
                found += 1
                counted += shipped
    print(f"advisories: {found} for locked versions, {counted} in Cargo.lock")
    sys.exit(1 if counted else 0)


if __name__ == "__main__":
    main()
