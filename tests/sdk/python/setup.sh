#!/usr/bin/env bash
# Installs everything the Python SDK interop suite needs, idempotently, into
# <repo>/.local/sdk/python:
#   venv/            a virtualenv (python3 >= 3.11, which the SDK requires)
#   ojs-python-sdk/  a copy of the unmodified SDK source (the original under
#                    ../shared/clients is never built in place)
# The SDK (package `openjobspec`, import `ojs`) is installed from that copy, plus
# pytest, pytest-asyncio and pytest-timeout from PyPI. A warm run (same SDK source,
# same requirements) only checks a stamp and returns.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
SDK_SRC="$ROOT/../shared/clients/ojs-python-sdk"
DEST="$ROOT/.local/sdk/python"
VENV="$DEST/venv"
SDK_COPY="$DEST/ojs-python-sdk"
PY="${PYTHON:-python3}"

# From PyPI: the test tooling (the suite relies on pytest-asyncio's asyncio_mode=auto
# and on pytest-timeout's --timeout), and `cryptography`, which `import ojs` needs
# (ojs/__init__.py imports ojs.encryption, which imports cryptography at module level)
# although the SDK's pyproject.toml does not declare it.
REQS=("pytest>=8,<10" "pytest-asyncio>=0.24,<2" "pytest-timeout>=2.3,<3" "cryptography>=42")

[ -d "$SDK_SRC/src/ojs" ] || { echo "setup.sh: SDK source not found at $SDK_SRC" >&2; exit 1; }
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "setup.sh: $PY is older than 3.11 (the SDK needs >= 3.11)" >&2; exit 1; }

# The stamp: a hash of the SDK source (paths and contents) and of the requirements.
sdk_hash="$(cd "$SDK_SRC" && find . -path ./.git -prune -o -type f -print | LC_ALL=C sort \
  | xargs sha256sum | sha256sum | cut -d' ' -f1)"
want="$sdk_hash ${REQS[*]} $("$PY" -c 'import sys; print(sys.version.split()[0])')"
stamp="$DEST/.stamp"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && "$VENV/bin/python" -c 'import ojs, pytest, pytest_asyncio, pytest_timeout' 2>/dev/null; then
  echo "setup.sh: up to date ($DEST)"
  exit 0
fi

mkdir -p "$DEST"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"

# Fresh copy of the SDK source (never build inside shared/).
rm -rf "$SDK_COPY"
mkdir -p "$SDK_COPY"
(cd "$SDK_SRC" && tar --exclude=.git -cf - .) | (cd "$SDK_COPY" && tar -xf -)

"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  --force-reinstall --no-deps "$SDK_COPY"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$SDK_COPY" "${REQS[@]}"
"$VENV/bin/python" -c 'import ojs; print("setup.sh: ojs from", ojs.__file__)'
echo "$want" > "$stamp"
echo "setup.sh: installed into $DEST"
