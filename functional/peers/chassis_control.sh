#!/bin/sh
# ipmi_sim's chassis_control program for one simulated BMC.
# Called as:  chassis_control.sh POWERFILE get power
#             chassis_control.sh POWERFILE set power 0|1  (also reset/shutdown/boot)
# POWERFILE holds "1" (on) or "0" (off). Test switches next to it:
#   POWERFILE.refuse   present: every "set" fails, as a BMC refusing the request
# Each call is appended to POWERFILE.log.
state=$1; shift
op=$1; shift
echo "$(date +%s.%N) $op $*" >> "$state.log"
[ -f "$state" ] || echo 1 > "$state"
case "$op" in
get)
    for item in "$@"; do
        case "$item" in
        power) echo "power:$(cat "$state")" ;;
        boot)  echo "boot:default" ;;
        *)     echo "unsupported: $item"; exit 1 ;;
        esac
    done ;;
set)
    if [ -e "$state.refuse" ]; then
        echo "refused by test switch"; exit 1
    fi
    while [ $# -ge 2 ]; do
        item=$1; value=$2; shift 2
        case "$item" in
        power)    echo "$value" > "$state.new" && mv "$state.new" "$state" ;;
        shutdown) echo 0 > "$state.new" && mv "$state.new" "$state" ;;
        reset|boot) ;;
        identify) [ $# -ge 1 ] && shift ;;
        *) echo "unsupported: $item"; exit 1 ;;
        esac
    done ;;
check) exit 1 ;;
*) echo "unsupported operation: $op"; exit 1 ;;
esac
exit 0
