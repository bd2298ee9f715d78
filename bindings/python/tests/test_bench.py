"""bench.py keeps working (a tiny run: the numbers mean nothing here)."""

from __future__ import annotations

import subprocess
import sys

from conftest import PYTHON_DIR


def test_bench_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(PYTHON_DIR / "bench.py"), "--number", "200", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "select+report / floor" in result.stdout
