"""Build step that puts libpolylb inside the package, so an installed polylb needs no env var.

Metadata lives in pyproject.toml; this file only adds two things setuptools cannot declare:
- build_py copies the native library into the built package: the file named by POLYLB_LIBRARY
  if set (a relative path is taken from the directory pip runs this build in, the source tree or
  a copy of it, not from where pip was started), else ../../target/release/libpolylb.so, which is built with
  `cargo build --release` first when it does not exist yet;
- the wheel is tagged for this platform (py3-none-<platform>): it carries a native library, but
  no Python extension module, so it works with any Python 3 on the same platform.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def library_filename() -> str:
    if sys.platform == "darwin":
        return "libpolylb.dylib"
    if sys.platform == "win32":
        return "polylb.dll"
    return "libpolylb.so"


def find_cargo() -> str:
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    if not Path(cargo).exists():
        raise SystemExit("polylb: cargo not found; install Rust or set POLYLB_LIBRARY to a built libpolylb")
    return cargo


def native_library() -> Path:
    override = os.environ.get("POLYLB_LIBRARY")
    if override:
        path = Path(override)
        if not path.is_file():
            where = ""
            if not path.is_absolute():
                # pip runs this build in the source tree (or a copy), not where pip was started;
                # the caller's directory is not known here ($PWD is only the calling shell's).
                where = (
                    f" (a relative path is taken from the build's directory, {Path.cwd()}, "
                    "not from where pip was started: give an absolute path)"
                )
            raise SystemExit(f"polylb: POLYLB_LIBRARY={override!r} does not name a file{where}")
        return path.resolve()
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    if not target.is_absolute():
        target = REPO / target
    built = target / "release" / library_filename()
    if not built.is_file():
        if not (REPO / "Cargo.toml").is_file():
            raise SystemExit(
                f"polylb: {built} is missing and {REPO} is not the polylb repository; "
                "set POLYLB_LIBRARY to a built libpolylb"
            )
        print(f"polylb: {built} is missing; running cargo build --release in {REPO}", flush=True)
        subprocess.run([find_cargo(), "build", "--release"], cwd=REPO, check=True)
        if not built.is_file():
            raise SystemExit(f"polylb: cargo build finished but {built} does not exist")
    return built


class BuildPyWithLibrary(build_py):
    """The usual build_py, then the native library copied next to the package's modules."""

    def run(self) -> None:
        super().run()
        source = native_library()
        destination = Path(self.build_lib) / "polylb" / library_filename()
        self.mkpath(str(destination.parent))
        # Always copied: copy_file skips a source older than the copy a previous build left in
        # build/, which would bundle that one instead of the library POLYLB_LIBRARY names.
        print(f"polylb: bundling {source}", flush=True)
        # Unlinked first: a read-only library (a package store's) was copied with its mode.
        destination.unlink(missing_ok=True)
        shutil.copyfile(source, destination)
        shutil.copymode(source, destination)


class BinaryDistribution(Distribution):
    """Platform-specific: the package carries a native library (but no extension module)."""

    def has_ext_modules(self) -> bool:
        return True


cmdclass = {"build_py": BuildPyWithLibrary}

try:  # setuptools >= 70.1 ships bdist_wheel; older ones need the separate wheel package
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover
    try:
        from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]
    except ImportError:
        bdist_wheel = None  # type: ignore[assignment,misc]

if bdist_wheel is not None:

    class PlatformWheel(bdist_wheel):  # type: ignore[misc,valid-type]
        # Not tied to one CPython version or ABI: ctypes only needs the platform to match.
        def get_tag(self) -> tuple:
            _, _, platform = super().get_tag()
            return "py3", "none", platform

    cmdclass["bdist_wheel"] = PlatformWheel

setup(distclass=BinaryDistribution, cmdclass=cmdclass)
