#!/usr/bin/env bash
# Create (or update) the project's virtualenv in .venv and install instanceha
# with its test requirements. Idempotent: a warm run takes a second or two.
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
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "bootstrap: installing python3-venv" >&2
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      "$py" -m venv "$venv"
    else
      echo "bootstrap: '$py -m venv' failed; install your distribution's python3-venv package" >&2
      exit 1
    fi
  fi
fi

# Debian packages the tests use: etcd-server for functional/test_coordination.py
# (it starts a private one per run; Debian's package starts none here:
# policy-rc.d keeps services down), shellcheck for the DevStack plugin's
# test, and prometheus for promtool (tests/unit/prometheus: the shipped
# rules' checks and unit tests) and for functional/sim/test_prometheus.py
# (a private server per run; where no policy-rc.d holds services down,
# Debian also starts its own prometheus service, on port 9090, which the
# tests do not use), and python3-libvirt for functional/test_agent_guest_
# events.py (libvirt's in-process test:///default driver; the venv does not
# see Debian's packages: the test loads that module from its directory).
# INSTANCEHA_SKIP_APT=1 skips them; without
# root or apt-get they are left to you (those tests then skip, or fail
# under INSTANCEHA_REQUIRE_SERVICES=1).
pkgs=
command -v etcd >/dev/null 2>&1 || pkgs="$pkgs etcd-server"
command -v shellcheck >/dev/null 2>&1 || pkgs="$pkgs shellcheck"
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 \
  || pkgs="$pkgs prometheus"
[ -f /usr/lib/python3/dist-packages/libvirt.py ] \
  || pkgs="$pkgs python3-libvirt"
if [ -n "$pkgs" ] && [ "${INSTANCEHA_SKIP_APT:-0}" != 1 ] \
    && command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi
  echo "bootstrap: installing$pkgs (Debian packages the tests use)" >&2
  # shellcheck disable=SC2086 # one word per package
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        $SUDO apt-get install -y -qq --no-install-recommends $pkgs >/dev/null; }; then
    echo "bootstrap: could not install$pkgs; the tests needing them will skip" >&2
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
