#!/usr/bin/env bash
# Build libpolylb, install the Python binding (which bundles it) and run the binding's tests.
# Exits non-zero on any failure. Extra arguments go to pytest (e.g. -k threads, -x).
#   PYTHON=python3.12 bindings/python/run-tests.sh   to use another interpreter
#   POLYLB_SKIP_MYPY=1                                 to skip installing mypy (its test then skips)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
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

# --force-reinstall: same version number, new library; --no-deps: there are none at run time.
"$python" -m pip install --quiet --root-user-action=ignore --force-reinstall --no-deps ./bindings/python

# From the repository root, so the tests import the installed package, not the source tree.
"$python" -m pytest bindings/python/tests -q "$@"
