#!/bin/sh
# Put the real fence_kdump_send (Debian package fence-agents) in a cache
# directory without installing the package and its many dependencies, and
# print the binary's path. Idempotent: a second run only prints the path.
#
#   tools/get-fence-kdump-send.sh [CACHE_DIR]
#
# CACHE_DIR defaults to $INSTANCEHA_CACHE/fence-agents or
# ~/.cache/instanceha/fence-agents. Needs apt-get and dpkg-deb (Debian or
# Ubuntu); run 'apt-get update' first on a fresh machine if the download
# finds no candidate (the script tries it once by itself when root).
set -eu

CACHE=${1:-${INSTANCEHA_CACHE:-$HOME/.cache/instanceha}/fence-agents}
BIN=$CACHE/root/usr/libexec/fence-agents/fence_kdump_send

if [ -x "$BIN" ]; then
    echo "$BIN"
    exit 0
fi
if [ -x /usr/libexec/fence-agents/fence_kdump_send ]; then
    echo /usr/libexec/fence-agents/fence_kdump_send
    exit 0
fi

mkdir -p "$CACHE"
cd "$CACHE"
if ! ls fence-agents_*.deb >/dev/null 2>&1; then
    if ! apt-get download fence-agents >&2; then
        if [ "$(id -u)" = 0 ]; then
            apt-get update >&2
            apt-get download fence-agents >&2
        else
            echo "cannot download fence-agents; run apt-get update" >&2
            exit 1
        fi
    fi
fi
rm -rf root.tmp
dpkg-deb -x fence-agents_*.deb root.tmp
rm -rf root
mv root.tmp root
test -x "$BIN"
echo "$BIN"
