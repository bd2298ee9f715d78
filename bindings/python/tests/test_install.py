"""Loading: the bundled library, the POLYLB_LIBRARY override and the fail-fast checks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Dict, Optional

import pytest

import polylb
from conftest import PYTHON_DIR

PACKAGE_DIR = Path(polylb.__file__).resolve().parent
RUNNING_FROM_SOURCE = PACKAGE_DIR == (PYTHON_DIR / "polylb").resolve()


def run_python(code: str, cwd: Path, env_changes: Dict[str, Optional[str]]) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for name, value in env_changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def importable_env() -> Dict[str, Optional[str]]:
    """An environment where a child process imports this same polylb, minus any override."""
    return {"PYTHONPATH": str(PACKAGE_DIR.parent), "POLYLB_LIBRARY": None}


@pytest.mark.skipif(RUNNING_FROM_SOURCE, reason="polylb is imported from the source tree, not installed")
def test_installed_package_bundles_the_library() -> None:
    bundled = PACKAGE_DIR / polylb._ffi.library_filename()
    assert bundled.is_file()
    assert (PACKAGE_DIR / "py.typed").is_file()
    if not os.environ.get("POLYLB_LIBRARY"):
        assert Path(polylb.library_path()) == bundled


@pytest.mark.skipif(RUNNING_FROM_SOURCE, reason="polylb is imported from the source tree, not installed")
def test_installed_package_works_from_any_directory(tmp_path: Path) -> None:
    result = run_python(
        """
        import polylb
        with polylb.Balancer("roundrobin") as lb:
            lb.update([polylb.Invoker(1, "10.0.0.1:20880")])
            assert lb.select() == 1
        print(polylb.library_path())
        """,
        cwd=tmp_path,
        env_changes={"PYTHONPATH": None, "POLYLB_LIBRARY": None},
    )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).parent == PACKAGE_DIR


def test_env_override_is_used(tmp_path: Path) -> None:
    copy = tmp_path / polylb._ffi.library_filename()
    shutil.copy(polylb.library_path(), copy)
    result = run_python(
        "import polylb; print(polylb.library_path())",
        cwd=tmp_path,
        env_changes={**importable_env(), "POLYLB_LIBRARY": str(copy)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(copy)


def test_env_override_relative_to_the_current_directory(tmp_path: Path) -> None:
    # A bare file name names the file in the current directory (dlopen alone would search the
    # system's library path for it instead).
    name = polylb._ffi.library_filename()
    shutil.copy(polylb.library_path(), tmp_path / name)
    result = run_python(
        "import polylb; print(polylb.library_path())",
        cwd=tmp_path,
        env_changes={**importable_env(), "POLYLB_LIBRARY": name},
    )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == (tmp_path / name).resolve()


def test_env_override_that_points_nowhere_fails_fast(tmp_path: Path) -> None:
    result = run_python(
        "import polylb",
        cwd=tmp_path,
        env_changes={**importable_env(), "POLYLB_LIBRARY": str(tmp_path / "missing.so")},
    )
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "POLYLB_LIBRARY" in result.stderr


def _compile_stub(tmp_path: Path, source: str) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None or sys.platform != "linux":
        pytest.skip("needs a C compiler on Linux to build a stand-in library")
    c_file = tmp_path / "stub.c"
    c_file.write_text(source)
    library = tmp_path / "libstub.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(c_file)], check=True)
    return library


def test_abi_version_mismatch_fails_fast(tmp_path: Path) -> None:
    stub = _compile_stub(tmp_path, "unsigned int plb_abi_version(void) { return 2; }\n")
    result = run_python(
        "import polylb",
        cwd=tmp_path,
        env_changes={**importable_env(), "POLYLB_LIBRARY": str(stub)},
    )
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert "C ABI version 2" in result.stderr and "needs version 1" in result.stderr


def test_library_missing_a_symbol_fails_fast(tmp_path: Path) -> None:
    stub = _compile_stub(tmp_path, "unsigned int plb_abi_version(void) { return 1; }\n")
    result = run_python(
        "import polylb",
        cwd=tmp_path,
        env_changes={**importable_env(), "POLYLB_LIBRARY": str(stub)},
    )
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "does not export plb_" in result.stderr


def test_not_a_library_fails_fast(tmp_path: Path) -> None:
    bogus = tmp_path / "libpolylb.so"
    bogus.write_text("not an ELF file")
    result = run_python(
        "import polylb",
        cwd=tmp_path,
        env_changes={**importable_env(), "POLYLB_LIBRARY": str(bogus)},
    )
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "cannot load" in result.stderr


def test_build_with_a_relative_library_path_names_the_directory_it_is_taken_from(tmp_path: Path) -> None:
    # pip runs the build in the source tree (or a copy), not where pip was started: a relative
    # POLYLB_LIBRARY that names a file from the caller's directory is not found, and the error
    # says where it was looked for and that an absolute path is needed.
    source = tmp_path / "src"
    shutil.copytree(PYTHON_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "tests", "__pycache__"))
    caller = tmp_path / "caller"
    caller.mkdir()
    name = Path(polylb.library_path()).name
    shutil.copy(polylb.library_path(), caller / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "wheels"), str(source)],
        cwd=caller,
        env={**os.environ, "POLYLB_LIBRARY": name},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"POLYLB_LIBRARY={name!r} does not name a file" in output, output
    assert "a relative path is taken from the build's directory" in output, output
    assert "give an absolute path" in output, output


def test_build_bundles_the_named_library_even_if_older(tmp_path: Path) -> None:
    # pip builds in the source tree and leaves build/ behind; a library named by POLYLB_LIBRARY
    # that is older than the copy there must still be the one bundled.
    source = tmp_path / "src"
    shutil.copytree(PYTHON_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "tests", "__pycache__"))
    current = Path(polylb.library_path())
    older = tmp_path / current.name
    older.write_bytes(current.read_bytes() + b"older build")
    os.utime(older, (1_577_836_800, 1_577_836_800))  # 2020-01-01
    for library in (current, older):
        wheels = tmp_path / f"wheels-{library is older}"
        result = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
            env={**os.environ, "POLYLB_LIBRARY": str(library)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr
        (wheel,) = wheels.glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            bundled = archive.read(f"polylb/{current.name}")
            # Apache-2.0 asks that a copy of the license go with every redistribution.
            licenses = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
            assert len(licenses) == 1, archive.namelist()
            assert archive.read(licenses[0]) == (PYTHON_DIR / "LICENSE").read_bytes()
        assert bundled == library.read_bytes(), f"{library} was not bundled"
    # The package's copy is the repository's license, word for word.
    assert (PYTHON_DIR / "LICENSE").read_bytes() == (PYTHON_DIR.parent.parent / "LICENSE").read_bytes()
