#!/bin/bash
# Run DevStack phases of devstack/plugin.sh the way stack.sh, unstack.sh
# and clean.sh source it, with the shims of shims.sh.
#
#   stack.sh PLUGIN_DIR PHASE...     PHASE: install post-config local
#                                    extra unstack clean
# "local" applies $SHIM_LOCAL_CONF (lines "SECTION OPTION VALUE") with
# iniset, as stack.sh merges a [[post-config|$INSTANCEHA_CONF]] block of
# local.conf after the plugins' post-config phase.
set -o errexit
set -o nounset
set -o pipefail

plugin_dir=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=functional/devstack/shims.sh
source "$here/shims.sh"
# stack.sh sources every plugin's settings first.
set +o nounset
# shellcheck source=devstack/settings
source "$plugin_dir/devstack/settings"
for phase in "$@"; do
    case "$phase" in
        install|post-config|extra)
            # shellcheck source=devstack/plugin.sh
            source "$plugin_dir/devstack/plugin.sh" stack "$phase" ;;
        local)
            while read -r section option value; do
                [[ -n "$section" ]] && iniset "$INSTANCEHA_CONF" "$section" "$option" "$value"
            done < "$SHIM_LOCAL_CONF" ;;
        unstack|clean)
            # shellcheck source=devstack/plugin.sh
            source "$plugin_dir/devstack/plugin.sh" "$phase" ;;
        *)
            echo "unknown phase $phase" >&2
            exit 2 ;;
    esac
done
