#!/usr/bin/env bash
# Create (or update) the project's virtualenv in .venv and install instanceha
# with its test requirements. Idempotent: a warm run takes a second or two.
# Python only: it installs no system package and needs no root (./tools/demo
# runs it; ./tools/test runs tools/test-packages.sh first for the system
# packages the tests use).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
venv="${INSTANCEHA_VENV:-$top/.venv}"
py="${PYTHON:-python3}"

if ! command -v "$py" >/dev/null 2>&1; then
  echo "bootstrap: $py not found; install Python 3.10 or newer" >&2
  exit 1
fi
"$py" - <<'PY' || { echo "bootstrap: Python 3.10 or newer is required" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY

if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    echo "bootstrap: '$py -m venv' failed; install your distribution's" \
         "python3-venv package (./tools/test-packages.sh does, as root)" >&2
    exit 1
  fi
fi

stamp="$venv/.instanceha-stamp"
want=$(cat "$top/requirements.txt" "$top/test-requirements.txt" "$top/setup.cfg" | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing instanceha and its requirements into $venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      -r "$top/requirements.txt" -r "$top/test-requirements.txt"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$top"
  echo "$want" > "$stamp"
fi
