# shellcheck shell=bash
# DevStack plugin for instanceha: instance high availability for Nova.
#
#   enable_plugin instanceha <repository URL or path> [branch]
#
# stack install     install the package (setup_develop)
# stack post-config write /etc/instanceha: instanceha.conf (iniset),
#                   clouds.yaml from DevStack's admin credentials, the BMC
#                   inventory (noop for an all-in-one node, said loudly);
#                   with Keystone, the operator API behind it and in its
#                   catalog (service type instanceha: the openstack CLI's
#                   `openstack instanceha ...` finds it there)
# stack extra       `instanceha check`, then run the service (run_process)
# unstack           stop it
# clean             remove its configuration and state
#
# With INSTANCEHA_AGENT=True, also the heartbeat agents (doc/agent.md): the
# engine's [agent] listener and the shared key file on the instanceha
# node; on every n-cpu node an instanceha-agent per compute host (one, or
# one per fake compute), configured at post-config, run at extra, stopped
# at unstack, removed at clean.
#
# Variables: devstack/settings, and INSTANCEHA_API_KEYSTONE (default True:
# with DevStack's keystone service, the operator API takes Keystone tokens
# on TCP, SERVICE_LISTEN_ADDRESS:INSTANCEHA_API_PORT, and is registered in
# the catalog; False keeps it on the unix socket only). DevStack's own
# (DEST, DATA_DIR, STACK_USER, ADMIN_PASSWORD, KEYSTONE_SERVICE_URI,
# REGION_NAME, SERVICE_HOST, SERVICE_PROTOCOL, SERVICE_LISTEN_ADDRESS,
# HOST_IP, VIRT_DRIVER, NOVA_CONF, NOVA_CPU_CONF) come from stack.sh; the
# Keystone functions (create_service_user, get_or_create_service,
# get_or_create_endpoint, configure_keystone_authtoken_middleware) from
# its lib/keystone.
# shellcheck disable=SC2154

INSTANCEHA_XTRACE=$(set +o | grep xtrace)
set +o xtrace

function instanceha_bin {
    # The console script $1 (default instanceha) beside DevStack's python
    # (its global venv).
    local name=${1:-instanceha}
    if declare -F get_python_exec_prefix >/dev/null; then
        echo "$(get_python_exec_prefix)/$name"
    else
        echo "$name"
    fi
}

function instanceha_all_in_one {
    # One node runs every service: stack.sh's SERVICE_HOST is this node.
    [[ -z "$SERVICE_HOST" || "$SERVICE_HOST" == "$HOST_IP" ]]
}

function install_instanceha {
    setup_develop "$INSTANCEHA_DIR"
}

function instanceha_write_clouds_yaml {
    # DevStack's admin credentials; readable by the service user only.
    local xtrace
    xtrace=$(set +o | grep xtrace)
    set +o xtrace
    local old_umask
    old_umask=$(umask)
    umask 077
    cat > "$INSTANCEHA_CLOUDS_FILE" <<CLOUDS
clouds:
  $INSTANCEHA_CLOUD:
    auth_type: password
    auth:
      auth_url: $KEYSTONE_SERVICE_URI/v3
      username: admin
      password: "$ADMIN_PASSWORD"
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: $REGION_NAME
    identity_api_version: 3
    interface: public
CLOUDS
    umask "$old_umask"
    $xtrace
}

function instanceha_write_inventory {
    if [[ -n "$INSTANCEHA_BMC_INVENTORY" ]]; then
        install -m 0600 "$INSTANCEHA_BMC_INVENTORY" "$INSTANCEHA_INVENTORY"
        return
    fi
    if [[ "$INSTANCEHA_FENCING_DRIVER" != "noop" ]]; then
        die $LINENO "instanceha: INSTANCEHA_FENCING_DRIVER=$INSTANCEHA_FENCING_DRIVER needs INSTANCEHA_BMC_INVENTORY (a BMC inventory file, see doc/inventory.md)"
    fi
    if ! instanceha_all_in_one; then
        die $LINENO "instanceha: the noop fencing driver powers nothing off; it is allowed only on an all-in-one node (SERVICE_HOST=$SERVICE_HOST is not HOST_IP=$HOST_IP). Give INSTANCEHA_BMC_INVENTORY"
    fi
    local host
    {
        echo "# Written by the instanceha DevStack plugin for an all-in-one node."
        echo "# driver noop: NOTHING IS POWERED OFF before evacuation."
        echo "hosts:"
        for host in $INSTANCEHA_COMPUTE_HOSTS; do
            echo "  $host: {driver: noop}"
        done
    } > "$INSTANCEHA_INVENTORY"
    chmod 0600 "$INSTANCEHA_INVENTORY"
    echo "*****************************************************************"
    echo "instanceha: fencing driver NOOP for $INSTANCEHA_COMPUTE_HOSTS."
    echo "A lost compute host is NOT powered off before its servers are"
    echo "evacuated. Acceptable only on this all-in-one test node; never on"
    echo "a cloud with real hosts ([fencing] allow_unfenced = true)."
    echo "*****************************************************************"
    warn $LINENO "instanceha: fencing driver noop (all-in-one test node only): hosts are NOT powered off"
}

function configure_instanceha {
    sudo install -d -o "$STACK_USER" -m 0750 "$INSTANCEHA_CONF_DIR"
    sudo install -d -o "$STACK_USER" -m 0750 "$INSTANCEHA_STATE_DIR"
    instanceha_write_clouds_yaml
    instanceha_write_inventory

    rm -f "$INSTANCEHA_CONF"
    iniset "$INSTANCEHA_CONF" DEFAULT cloud "$INSTANCEHA_CLOUD"
    iniset "$INSTANCEHA_CONF" DEFAULT clouds_file "$INSTANCEHA_CLOUDS_FILE"
    iniset "$INSTANCEHA_CONF" DEFAULT status_file "$INSTANCEHA_STATE_DIR/status.json"
    iniset "$INSTANCEHA_CONF" journal connection "sqlite:///$INSTANCEHA_STATE_DIR/journal.sqlite"
    iniset "$INSTANCEHA_CONF" fencing inventory "$INSTANCEHA_INVENTORY"
    if [[ -z "$INSTANCEHA_BMC_INVENTORY" ]]; then
        iniset "$INSTANCEHA_CONF" fencing allow_unfenced True
    fi
    iniset "$INSTANCEHA_CONF" api unix_socket "$INSTANCEHA_API_SOCKET"
    iniset "$INSTANCEHA_CONF" api listen_address 127.0.0.1
    iniset "$INSTANCEHA_CONF" api port "$INSTANCEHA_API_PORT"
    # Commands only through the socket (said, so the service does not warn
    # about a TCP port set without it).
    iniset "$INSTANCEHA_CONF" api allow_unauthenticated_tcp False
    if [[ "$(trueorfalse False INSTANCEHA_NOTIFICATIONS)" == "True" ]]; then
        iniset "$INSTANCEHA_CONF" notifications enabled True
        iniset "$INSTANCEHA_CONF" notifications transport_url "$(get_notification_url)"
    fi
    if instanceha_agent_enabled; then
        instanceha_agent_write_key
        instanceha_configure_engine_agent
    fi
    if instanceha_api_keystone; then
        create_instanceha_accounts
        configure_instanceha_api_keystone
    fi
    chmod 0640 "$INSTANCEHA_CONF"
}

# -- the operator API in Keystone's catalog ----------------------------------

function instanceha_api_keystone {
    # The operator API behind Keystone and in its catalog: whenever
    # DevStack runs Keystone, unless INSTANCEHA_API_KEYSTONE=False.
    [[ "$(trueorfalse True INSTANCEHA_API_KEYSTONE)" == "True" ]] \
        && is_service_enabled keystone
}

function instanceha_api_url {
    echo "${SERVICE_PROTOCOL:-http}://$(instanceha_hostport "$SERVICE_HOST" "$INSTANCEHA_API_PORT")"
}

function create_instanceha_accounts {
    # The service user keystonemiddleware validates tokens as, and the
    # service type instanceha with its endpoint (public, internal, admin),
    # where `openstack instanceha ...` finds the API.
    create_service_user "instanceha"
    get_or_create_service "instanceha" "instanceha" "instanceha operator API (instance high availability)"
    get_or_create_endpoint "instanceha" "$REGION_NAME" "$(instanceha_api_url)"
}

function configure_instanceha_api_keystone {
    # Commands and reads on TCP with a Keystone token and the policy's
    # admin role; the unix socket stays for the local instanceha CLI.
    iniset "$INSTANCEHA_CONF" api auth_strategy keystone
    iniset "$INSTANCEHA_CONF" api listen_address "${SERVICE_LISTEN_ADDRESS:-$SERVICE_HOST}"
    configure_keystone_authtoken_middleware "$INSTANCEHA_CONF" instanceha
}

function start_instanceha {
    local bin
    bin=$(instanceha_bin)
    if instanceha_agent_enabled; then
        instanceha_engine_report_interval
    fi
    if [[ "$(trueorfalse True INSTANCEHA_CHECK)" == "True" ]]; then
        "$bin" check --config-file "$INSTANCEHA_CONF" \
            || die $LINENO "instanceha check failed: see the FAIL lines above"
    fi
    run_process instanceha "$bin run --config-file $INSTANCEHA_CONF"
}

function stop_instanceha {
    stop_process instanceha
}

function cleanup_instanceha {
    sudo rm -rf "$INSTANCEHA_STATE_DIR"
    sudo rm -f "$INSTANCEHA_CONF" "$INSTANCEHA_CLOUDS_FILE" "$INSTANCEHA_INVENTORY"
    sudo rmdir "$INSTANCEHA_CONF_DIR" 2>/dev/null || true
}

# -- heartbeat agents (INSTANCEHA_AGENT=True) --------------------------------

function instanceha_agent_enabled {
    [[ "$(trueorfalse False INSTANCEHA_AGENT)" == "True" ]]
}

function instanceha_agent_here {
    # This node runs nova-compute: it gets the agent(s).
    instanceha_agent_enabled && is_service_enabled n-cpu
}

function instanceha_hostport {
    # address:port, [address]:port for IPv6.
    if [[ "$1" == *:* ]]; then
        echo "[$1]:$2"
    else
        echo "$1:$2"
    fi
}

function instanceha_agent_engine {
    # Where the engine listens for beats: INSTANCEHA_AGENT_ENGINE_HOST
    # (default SERVICE_HOST, else HOST_IP) on INSTANCEHA_AGENT_PORT.
    instanceha_hostport "${INSTANCEHA_AGENT_ENGINE_HOST:-${SERVICE_HOST:-$HOST_IP}}" "$INSTANCEHA_AGENT_PORT"
}

function instanceha_agent_write_key {
    # The key file shared by the engine and the agents, mode 0600, owned
    # by the stack user who runs both. INSTANCEHA_AGENT_KEY (local.conf)
    # is written to it; unset, an existing file is kept, else an
    # all-in-one node generates one. The key is never echoed, and xtrace
    # is off throughout.
    local xtrace
    xtrace=$(set +o | grep xtrace)
    set +o xtrace
    local old_umask key
    old_umask=$(umask)
    umask 077
    # As the agent reads the file: white space around the key ignored.
    key=${INSTANCEHA_AGENT_KEY:-}
    key=${key#"${key%%[![:space:]]*}"}
    key=${key%"${key##*[![:space:]]}"}
    if [[ -n "${INSTANCEHA_AGENT_KEY:-}" ]]; then
        if (( ${#key} < 32 )) || [[ "$key" == *[$'\n\r']* ]]; then
            umask "$old_umask"
            die $LINENO "instanceha: INSTANCEHA_AGENT_KEY must be one line of at least 32 characters, e.g. openssl rand -hex 32"
        fi
        printf '%s\n' "$key" > "$INSTANCEHA_AGENT_KEY_FILE"
    elif [[ ! -s "$INSTANCEHA_AGENT_KEY_FILE" ]]; then
        if ! instanceha_all_in_one; then
            umask "$old_umask"
            die $LINENO "instanceha: INSTANCEHA_AGENT=True on a multi-node cloud needs INSTANCEHA_AGENT_KEY in local.conf (the same secret of at least 32 characters on every node)"
        fi
        key=$(od -An -v -tx1 -N32 /dev/urandom | tr -d ' \n')
        if (( ${#key} != 64 )); then
            umask "$old_umask"
            die $LINENO "instanceha: could not read 32 bytes from /dev/urandom for the agents' key"
        fi
        printf '%s\n' "$key" > "$INSTANCEHA_AGENT_KEY_FILE"
    fi
    key=
    chmod 0600 "$INSTANCEHA_AGENT_KEY_FILE"
    umask "$old_umask"
    $xtrace
}

function instanceha_configure_engine_agent {
    # The engine's [agent] options: listen where the agents send.
    iniset "$INSTANCEHA_CONF" agent listen_addresses "$(instanceha_agent_engine)"
    iniset "$INSTANCEHA_CONF" agent key_file "$INSTANCEHA_AGENT_KEY_FILE"
    iniset "$INSTANCEHA_CONF" agent request_port "$INSTANCEHA_AGENT_REQUEST_PORT"
    iniset "$INSTANCEHA_CONF" agent restart_compute "$(trueorfalse False INSTANCEHA_AGENT_RESTART_COMPUTE)"
}

function instanceha_engine_report_interval {
    # [agent] nova_report_interval: Nova's [DEFAULT] report_interval, read
    # at extra (local.conf's post-config blocks are merged by then), from
    # nova-cpu.conf then nova.conf, else Nova's default 10. A value set in
    # instanceha.conf (a post-config block) is kept.
    local file value=""
    if [[ -n "$(iniget "$INSTANCEHA_CONF" agent nova_report_interval)" ]]; then
        return 0
    fi
    for file in "${NOVA_CPU_CONF:-/etc/nova/nova-cpu.conf}" "${NOVA_CONF:-/etc/nova/nova.conf}"; do
        if [[ -r "$file" ]]; then
            value=$(iniget "$file" DEFAULT report_interval)
            [[ -n "$value" ]] && break
        fi
    done
    iniset "$INSTANCEHA_CONF" agent nova_report_interval "${value:-10}"
}

function instanceha_agent_fake {
    # Several fake computes on this node (VIRT_DRIVER=fake): one agent
    # per host of INSTANCEHA_COMPUTE_HOSTS.
    [[ "$VIRT_DRIVER" == "fake" ]]
}

function instanceha_agent_list {
    # One line per agent of this node: "NAME HOST INDEX". NAME is the
    # DevStack service; HOST the Nova host name ("-": the agent reads it
    # from nova-cpu.conf, as nova-compute does); INDEX the fake compute's
    # number, from DevStack's ${HOSTNAME}N names, else the host's position.
    local host i=0 n
    if ! instanceha_agent_fake; then
        echo "instanceha-agent - 0"
        return 0
    fi
    for host in $INSTANCEHA_COMPUTE_HOSTS; do
        i=$((i + 1))
        n=$i
        if [[ "$host" =~ ^${HOSTNAME}([0-9]+)$ ]]; then
            n=${BASH_REMATCH[1]}
        fi
        echo "instanceha-agent-$host $host $n"
    done
}

function instanceha_agent_conf_file {
    if [[ "$1" == "instanceha-agent" ]]; then
        echo "$INSTANCEHA_AGENT_CONF"
    else
        echo "$INSTANCEHA_CONF_DIR/$1.conf"
    fi
}

function configure_instanceha_agent {
    local name host n conf address unit restart count
    sudo install -d -o "$STACK_USER" -m 0750 "$INSTANCEHA_CONF_DIR"
    instanceha_agent_write_key
    restart=$(trueorfalse False INSTANCEHA_AGENT_RESTART_COMPUTE)
    count=$(instanceha_agent_list | wc -l)
    if instanceha_agent_fake && ! instanceha_all_in_one \
            && [[ "$restart" == "True" ]] && (( count > 1 )); then
        die $LINENO "instanceha: INSTANCEHA_AGENT_RESTART_COMPUTE with several fake computes needs an all-in-one node (each agent gets a loopback address the engine's requests reach)"
    fi
    while read -r name host n; do
        conf=$(instanceha_agent_conf_file "$name")
        rm -f "$conf"
        iniset "$conf" agent engines "$(instanceha_agent_engine)"
        iniset "$conf" agent key_file "$INSTANCEHA_AGENT_KEY_FILE"
        if [[ "$host" == "-" ]]; then
            # As nova-compute: nova-cpu.conf's [DEFAULT] host, else the
            # host name.
            iniset "$conf" agent nova_conf "${NOVA_CPU_CONF:-/etc/nova/nova-cpu.conf}"
            address=$HOST_IP
            unit=devstack@n-cpu.service
        else
            iniset "$conf" agent host "$host"
            # A fake compute has no libvirt.
            iniset "$conf" agent libvirt_check none
            iniset "$conf" agent count_guests False
            unit=devstack@n-cpu-$n.service
            address=$HOST_IP
            if instanceha_all_in_one; then
                # Its own loopback source address: the engine's requests
                # go back to where the host's beats came from.
                address=$INSTANCEHA_AGENT_FAKE_NET.$n
            fi
        fi
        # Beats leave from this address, the one requests come back to.
        iniset "$conf" agent paths "mgmt=$address"
        iniset "$conf" agent compute_units "$unit"
        if [[ "$restart" == "True" ]]; then
            iniset "$conf" agent control_addresses "$(instanceha_hostport "$address" "$INSTANCEHA_AGENT_REQUEST_PORT")"
            iniset "$conf" agent restart_compute True
            # The agent runs as the stack user; DevStack gives it sudo.
            iniset "$conf" agent restart_command "sudo,-n,systemctl,--no-block,restart,{unit}"
        fi
        chmod 0640 "$conf"
    done < <(instanceha_agent_list)
}

function start_instanceha_agent {
    local bin name host n
    bin=$(instanceha_bin instanceha-agent)
    while read -r name host n; do
        run_process "$name" "$bin --config-file $(instanceha_agent_conf_file "$name")"
    done < <(instanceha_agent_list)
}

function stop_instanceha_agent {
    local name host n
    while read -r name host n; do
        stop_process "$name"
    done < <(instanceha_agent_list)
}

function cleanup_instanceha_agent {
    local name host n
    while read -r name host n; do
        sudo rm -f "$(instanceha_agent_conf_file "$name")"
    done < <(instanceha_agent_list)
    sudo rm -f "$INSTANCEHA_AGENT_KEY_FILE"
    sudo rmdir "$INSTANCEHA_CONF_DIR" 2>/dev/null || true
}

if is_service_enabled instanceha || instanceha_agent_here; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing instanceha"
        install_instanceha
    fi
fi
if is_service_enabled instanceha; then
    if [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring instanceha"
        configure_instanceha
    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Starting instanceha"
        start_instanceha
    fi
    if [[ "$1" == "unstack" ]]; then
        stop_instanceha
    fi
fi
# The agents after the engine: the key file exists, the listener is bound.
if instanceha_agent_here; then
    if [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring instanceha-agent"
        configure_instanceha_agent
    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Starting instanceha-agent"
        start_instanceha_agent
    fi
    if [[ "$1" == "unstack" ]]; then
        stop_instanceha_agent
    fi
    if [[ "$1" == "clean" ]]; then
        cleanup_instanceha_agent
    fi
fi
if is_service_enabled instanceha && [[ "$1" == "clean" ]]; then
    if instanceha_agent_enabled; then
        sudo rm -f "$INSTANCEHA_AGENT_KEY_FILE"
    fi
    cleanup_instanceha
fi

$INSTANCEHA_XTRACE
