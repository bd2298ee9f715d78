"""The package type-checks under ``mypy --strict`` and its hints catch misuse (py.typed ships).

Skipped when mypy is not installed; bindings/python/run-tests.sh installs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import polylb
from conftest import PYTHON_DIR

pytest.importorskip("mypy", reason="mypy is not installed (run-tests.sh installs it)")

PACKAGE_DIR = Path(polylb.__file__).resolve().parent
FROM_SOURCE = PACKAGE_DIR == (PYTHON_DIR / "polylb").resolve()


def run_mypy(*targets: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if FROM_SOURCE:  # installed packages are found through site-packages and their py.typed
        env["MYPYPATH"] = str(PACKAGE_DIR.parent)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, *targets],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


GOOD_USE = """
    from typing import Any, Dict
    import polylb
    from polylb import Balancer, Invoker, Outcome

    with Balancer("consistenthash", hash_nodes=160) as lb:
        lb.update([Invoker(1, "10.0.0.1:20880"), Invoker(2, b"10.0.0.2:20880", weight=50)])
        method: int = lb.method("sayHello")
        picked: int = lb.select(key="user-1", method=method, among=[1, 2], exclude=polylb.id_array([2]))
        lb.report(picked, 100, Outcome.SUCCESS, method=method)
        lb.report_load(picked, 120.0, 1.5, 0.6, now_us=0)
        lb.report_reconnect(picked, now_us=0)
        with lb.call(key=b"k") as call:
            chosen: int = call.id
        stats: Dict[str, Any] = lb.stats()
    try:
        Balancer(config="loadBalance=random")
    except polylb.PolylbError as error:
        status: int = error.status
        message: str = error.message
"""

BAD_USE = """
    from polylb import Balancer
    lb = Balancer()
    lb.select(key=5)
"""


def test_package_passes_mypy_strict(tmp_path: Path) -> None:
    # A copy of the imported package's sources: mypy refuses to check files inside site-packages.
    copy = tmp_path / "polylb"
    copy.mkdir()
    for source in PACKAGE_DIR.glob("*.py"):
        (copy / source.name).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    result = run_mypy("polylb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_typical_use_type_checks(tmp_path: Path) -> None:
    (tmp_path / "use.py").write_text(textwrap.dedent(GOOD_USE))
    result = run_mypy("use.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_misuse_is_caught(tmp_path: Path) -> None:
    (tmp_path / "misuse.py").write_text(textwrap.dedent(BAD_USE))
    result = run_mypy("misuse.py", cwd=tmp_path)
    assert result.returncode != 0
    assert "key" in result.stdout
