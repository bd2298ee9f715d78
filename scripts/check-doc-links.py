#!/usr/bin/env python3
"""Every relative link in the project's Markdown leads somewhere: the file exists and, for a
`#anchor`, the target has a heading with that GitHub anchor. Docs are moved and headings renamed
as the project changes; a broken link is found here, not by a reader.

Usage: python3 scripts/check-doc-links.py  (from anywhere; exits 1 listing every broken link)
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Pieces pasted into another file (bench/report.py assembles BENCHMARKS.md from them): their
# links are written for where they end up, and are checked there.
FRAGMENTS = {"bench/BENCHMARKS.intro.md", "bench/BENCHMARKS.notes.md"}

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_markdown() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    return [ROOT / line for line in out.splitlines() if line and line not in FRAGMENTS]


def outside_code(text: str) -> list[str]:
    """The lines of a Markdown text that are not inside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces
    become '-' (inline code and links keep their text)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


@lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in outside_code(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = github_anchor(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def broken_links(path: Path) -> list[str]:
    problems = []
    for line in outside_code(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}: ({target})"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: no heading with that anchor in {dest.relative_to(ROOT)}")
    return problems


def main() -> int:
    files = tracked_markdown()
    problems = [p for f in files for p in broken_links(f)]
    for p in problems:
        print(p, file=sys.stderr)
    print(f"check-doc-links: {len(files)} Markdown files, {len(problems)} broken links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
