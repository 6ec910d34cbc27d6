#!/usr/bin/env bash
# The system packages the test suite uses, installed with apt-get (as root,
# or through 'sudo -n'): ./tools/test runs this before tools/bootstrap.sh.
# ./tools/demo never runs it: the demo needs only Python.
#
# - python3-venv, where '$PYTHON -m venv' cannot work (Debian's python3
#   lacks ensurepip without it);
# - etcd-server for functional/test_coordination.py (it starts a private
#   one per run; Debian's package starts none here: policy-rc.d keeps
#   services down);
# - shellcheck for the DevStack plugin's test;
# - prometheus for promtool (tests/unit/prometheus: the shipped rules'
#   checks and unit tests) and for functional/sim/test_prometheus.py (a
#   private server per run). Where no policy-rc.d holds services down,
#   Debian also starts its own prometheus service, on port 9090, which the
#   tests do not use;
# - python3-libvirt for functional/test_agent_guest_events.py (libvirt's
#   in-process test:///default driver; the venv does not see Debian's
#   packages: the test loads that module from its directory);
# - ceph-mon, ceph-common (monmaptool comes with ceph-base) and
#   python3-rados for functional/test_fencing_ceph.py (a private monitor
#   per run on loopback, no OSD; the ceph_blocklist driver loads the rados
#   module from its directory).
# - dbus (dbus-daemon) for functional/sim/test_shutdown_drain.py (a
#   private bus per run with a fake systemd-logind on it).
#
# INSTANCEHA_SKIP_APT=1 skips them; without root (or sudo) or apt-get they
# are left to you (those tests then skip, or fail under
# INSTANCEHA_REQUIRE_SERVICES=1).
set -euo pipefail
py="${PYTHON:-python3}"

pkgs=
if command -v "$py" >/dev/null 2>&1 \
    && ! "$py" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  pkgs="$pkgs python3-venv"
fi
command -v etcd >/dev/null 2>&1 || pkgs="$pkgs etcd-server"
command -v shellcheck >/dev/null 2>&1 || pkgs="$pkgs shellcheck"
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 \
  || pkgs="$pkgs prometheus"
[ -f /usr/lib/python3/dist-packages/libvirt.py ] \
  || pkgs="$pkgs python3-libvirt"
{ command -v ceph-mon && command -v monmaptool && command -v ceph; } \
  >/dev/null 2>&1 || pkgs="$pkgs ceph-mon ceph-common"
compgen -G "/usr/lib/python3/dist-packages/rados.cpython-*.so" >/dev/null \
  || pkgs="$pkgs python3-rados"
command -v dbus-daemon >/dev/null 2>&1 || pkgs="$pkgs dbus"
if [ -z "$pkgs" ] || [ "${INSTANCEHA_SKIP_APT:-0}" = 1 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "test-packages: no apt-get; install$pkgs yourself (the tests" \
       "needing them skip)" >&2
  exit 0
fi
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi
echo "test-packages: installing$pkgs (Debian packages the tests use)" >&2
# shellcheck disable=SC2086 # one word per package
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      $SUDO apt-get install -y -qq --no-install-recommends $pkgs >/dev/null; }; then
  echo "test-packages: could not install$pkgs; the tests needing them" \
       "will skip" >&2
fi
