# shellcheck shell=bash
# The DevStack functions devstack/plugin.sh calls, as small stand-ins that
# act inside a test directory: files are written for real, processes run
# for real (in the background instead of as systemd units), packages are
# not installed (the test's virtualenv already holds instanceha). Every call
# is appended to $SHIM_DIR/calls.log.
#
# Needs: SHIM_DIR (a writable directory), SHIM_PYTHON (the venv's python).
# shellcheck disable=SC2154

function _shim_log {
    echo "$*" >> "$SHIM_DIR/calls.log"
}

function sudo {
    # The test runs as a user who owns its directories.
    _shim_log "sudo $*"
    "$@"
}

function enable_service {
    # As DevStack's: a service local.conf disabled (DISABLED_SERVICES)
    # stays disabled.
    _shim_log "enable_service $*"
    if [[ ",${DISABLED_SERVICES:-}," == *",$1,"* ]]; then
        warn 0 "Attempt to enable_service $1 when it has been disabled"
        return 0
    fi
    ENABLED_SERVICES="${ENABLED_SERVICES:+$ENABLED_SERVICES,}$1"
}

function is_service_enabled {
    local service
    for service in "$@"; do
        [[ ",$ENABLED_SERVICES," == *",$service,"* ]] && return 0
    done
    return 1
}

function echo_summary {
    echo "summary: $*"
}

function warn {
    local line=$1
    shift
    _shim_log "warn $*"
    echo "WARNING (line $line): $*" >&2
}

function die {
    local line=$1
    shift
    _shim_log "die $*"
    echo "ERROR (line $line): $*" >&2
    exit 1
}

function trueorfalse {
    # DevStack's: the value of variable $2 as True/False, default $1.
    local default=$1
    local value=${!2:-$default}
    case "${value,,}" in
        1|yes|true|on) echo True ;;
        *) echo False ;;
    esac
}

function setup_develop {
    # pip install -e in DevStack; here the venv already has the package.
    _shim_log "setup_develop $*"
}

function get_python_exec_prefix {
    dirname "$SHIM_PYTHON"
}

function get_notification_url {
    echo "${SHIM_NOTIFICATION_URL:-rabbit://stackrabbit:pass@127.0.0.1:5672/}"
}

function iniset {
    # iniset [-sudo] FILE SECTION OPTION VALUE
    [[ "$1" == "-sudo" ]] && shift
    _shim_log "iniset $1 [$2] $3"
    "$SHIM_PYTHON" - "$@" <<'PY'
import configparser, os, sys
path, section, option, value = sys.argv[1:5]
parser = configparser.RawConfigParser()
parser.optionxform = str
if os.path.exists(path):
    parser.read(path)
if section != "DEFAULT" and not parser.has_section(section):
    parser.add_section(section)
parser.set(section, option, value)
with open(path, "w") as f:
    parser.write(f)
PY
}

function iniget {
    # iniget FILE SECTION OPTION: the value, or nothing.
    "$SHIM_PYTHON" - "$@" <<'PY'
import configparser, sys
path, section, option = sys.argv[1:4]
parser = configparser.RawConfigParser()
parser.optionxform = str
parser.read(path)
print(parser.get(section, option, fallback=""))
PY
}

function run_process {
    # DevStack starts a devstack@NAME systemd unit, for an enabled service
    # only; here a background process whose pid and output stay in
    # SHIM_DIR.
    local name=$1 command=$2
    if ! is_service_enabled "$name"; then
        _shim_log "run_process (not enabled) $name"
        return 0
    fi
    _shim_log "run_process $name $command"
    setsid bash -c "exec $command" \
        >> "$SHIM_DIR/$name.log" 2>&1 < /dev/null &
    echo $! > "$SHIM_DIR/$name.pid"
}

function stop_process {
    local name=$1 pid
    if ! is_service_enabled "$name"; then
        _shim_log "stop_process (not enabled) $name"
        return 0
    fi
    _shim_log "stop_process $name"
    [[ -f "$SHIM_DIR/$name.pid" ]] || return 0
    pid=$(cat "$SHIM_DIR/$name.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$SHIM_DIR/$name.pid"
}
