#!/usr/bin/env bash
# Build libpolylb, install the Python binding (which bundles it) and run the binding's tests.
# Exits non-zero on any failure. Extra arguments go to pytest (e.g. -k threads, -x).
#   PYTHON=python3.12 bindings/python/run-tests.sh   to use another interpreter
#   POLYLB_SKIP_MYPY=1                                 to skip installing mypy (its test then skips)
#   POLYLB_SKIP_GRPC=1                                 to skip installing grpcio (the gRPC end-to-end
#                                                      tests then skip; the binding never needs it)
#   POLYLB_SKIP_HTTPX=1                                to skip installing httpx (tests/test_httpx.py
#                                                      then skips; only polylb.httpx needs it)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# A relative POLYLB_LIBRARY names a file from the caller's directory; made absolute before the cd
# below, and before pip, which runs the build in bindings/python (where setup.py would look).
if [ -n "${POLYLB_LIBRARY:-}" ] && [ "${POLYLB_LIBRARY#/}" = "$POLYLB_LIBRARY" ]; then
    export POLYLB_LIBRARY="$PWD/$POLYLB_LIBRARY"
fi
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
cd "$repo"

# Build first, so the installed package bundles the library of this checkout, not a stale one
# (setup.py builds only when the library is missing). Cheap when nothing changed.
if [ -z "${POLYLB_LIBRARY:-}" ]; then
    cargo="$(command -v cargo || echo "$HOME/.cargo/bin/cargo")"
    "$cargo" build --release
fi

"$python" -c "import pytest" 2>/dev/null || "$python" -m pip install --quiet --root-user-action=ignore pytest
if [ -z "${POLYLB_SKIP_MYPY:-}" ]; then
    "$python" -c "import mypy" 2>/dev/null || "$python" -m pip install --quiet --root-user-action=ignore mypy \
        || echo "run-tests.sh: could not install mypy; the type-check tests will be skipped" >&2
fi
# Only for tests/test_grpc_end_to_end.py: `with lb.call()` around real grpcio calls.
if [ -z "${POLYLB_SKIP_GRPC:-}" ]; then
    "$python" -c "import grpc" 2>/dev/null || "$python" -m pip install --quiet --root-user-action=ignore grpcio \
        || echo "run-tests.sh: could not install grpcio; the gRPC end-to-end tests will be skipped" >&2
fi

# Only for tests/test_httpx.py: polylb.httpx's transports (the `httpx` extra of pyproject.toml).
if [ -z "${POLYLB_SKIP_HTTPX:-}" ]; then
    "$python" -c "import httpx" 2>/dev/null || "$python" -m pip install --quiet --root-user-action=ignore "httpx>=0.28" \
        || echo "run-tests.sh: could not install httpx; the httpx transport tests will be skipped" >&2
fi

# --force-reinstall: same version number, new library; --no-deps: there are none at run time.
"$python" -m pip install --quiet --root-user-action=ignore --force-reinstall --no-deps ./bindings/python

# From the repository root, so the tests import the installed package, not the source tree.
# -rs: the reason of every skipped test is printed (mypy, grpcio or httpx missing).
"$python" -m pytest bindings/python/tests -q -rs "$@"
