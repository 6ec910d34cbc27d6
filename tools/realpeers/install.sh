#!/bin/bash
# Install the real peers that functional/realnova and functional/conformance
# start: Nova + Placement (venv of their own), Keystone (venv of its own),
# sushy-tools (venv of its own),
# and Debian's ipmitool / openipmi / fence-agents / mariadb-server when
# missing.
#
# Idempotent. The venvs live in a cache directory keyed by the pinned
# versions, so a second run (and every test run) finds them ready:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/instanceha/nova-<key>/
#   ${XDG_CACHE_HOME:-$HOME/.cache}/instanceha/keystone-<key>/
#   ${XDG_CACHE_HOME:-$HOME/.cache}/instanceha/sushy-<key>/
#
# Prints the venv paths as `NOVA_VENV=...` / `KEYSTONE_VENV=...` /
# `SUSHY_VENV=...` lines.
# Env: INSTANCEHA_SKIP_APT=1 skips the apt step; PYTHON picks the interpreter.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=versions.sh
. "$HERE/versions.sh"

PYTHON=${PYTHON:-python3}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/instanceha
mkdir -p "$CACHE"

log() { echo "realpeers-install: $*" >&2; }

# --- Debian packages ---------------------------------------------------------
need_apt=()
command -v ipmitool >/dev/null 2>&1 || need_apt+=(ipmitool)
command -v ipmi_sim >/dev/null 2>&1 || need_apt+=(openipmi)
# ClusterLabs fence agents (the fence_agent driver's functional tests run
# the real fence_ipmilan and fence_redfish). Debian puts them in /usr/sbin,
# which a non-root PATH may lack, hence the second look.
if ! command -v fence_ipmilan >/dev/null 2>&1 && [ ! -x /usr/sbin/fence_ipmilan ]; then
    need_apt+=(fence-agents)
fi
if ! command -v mariadbd >/dev/null 2>&1 && ! command -v mysqld >/dev/null 2>&1; then
    need_apt+=(mariadb-server)
fi
if [ ${#need_apt[@]} -gt 0 ] && [ "${INSTANCEHA_SKIP_APT:-0}" != 1 ]; then
    log "apt-get install ${need_apt[*]}"
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -q >&2
    # policy-rc.d on these machines keeps packaged services from starting;
    # the fixtures start what they need themselves.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
        "${need_apt[@]}" >&2
fi

# --- venvs -------------------------------------------------------------------
# make_venv NAME KEY PACKAGES...: build $CACHE/NAME-KEY unless it has a
# .complete marker; an interrupted install leaves no marker and is redone.
make_venv() {
    local name=$1 key=$2; shift 2
    local dest="$CACHE/$name-$key"
    if [ -f "$dest/.complete" ]; then
        log "$name venv ready: $dest"
        echo "$dest"
        return
    fi
    log "building $name venv in $dest (cold install; about a minute)"
    local t0=$SECONDS
    # The venv path is baked into its scripts, so it is built in place; the
    # .complete marker, written last, is what makes it count as ready.
    rm -rf "$dest"
    "$PYTHON" -m venv "$dest"
    # The machine-wide pip constraints are for the project's venv, not this one.
    PIP_CONSTRAINT='' "$dest/bin/pip" install -q --upgrade pip wheel setuptools >&2
    PIP_CONSTRAINT='' "$dest/bin/pip" install -q "$@" >&2
    "$dest/bin/pip" freeze > "$dest/.freeze"
    touch "$dest/.complete"
    log "$name venv built in $((SECONDS - t0)) s"
    echo "$dest"
}

PYVER=$("$PYTHON" -c 'import sys; print("py%d.%d" % sys.version_info[:2])')
NOVA_VENV=$(make_venv nova "$NOVA_KEY-$PYVER" "${NOVA_PACKAGES[@]}")
KEYSTONE_VENV=$(make_venv keystone "$KEYSTONE_KEY-$PYVER" "${KEYSTONE_PACKAGES[@]}")
SUSHY_VENV=$(make_venv sushy "$SUSHY_KEY-$PYVER" "${SUSHY_PACKAGES[@]}")

echo "NOVA_VENV=$NOVA_VENV"
echo "KEYSTONE_VENV=$KEYSTONE_VENV"
echo "SUSHY_VENV=$SUSHY_VENV"
