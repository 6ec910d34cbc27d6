# shellcheck shell=bash
# DevStack plugin for instanceha: instance high availability for Nova.
#
#   enable_plugin instanceha <repository URL or path> [branch]
#
# stack install     install the package (setup_develop)
# stack post-config write /etc/instanceha: instanceha.conf (iniset),
#                   clouds.yaml from DevStack's admin credentials, the BMC
#                   inventory (noop for an all-in-one node, said loudly)
# stack extra       `instanceha check`, then run the service (run_process)
# unstack           stop it
# clean             remove its configuration and state
#
# Variables: devstack/settings. DevStack's own (DEST, DATA_DIR, STACK_USER,
# ADMIN_PASSWORD, KEYSTONE_SERVICE_URI, REGION_NAME, SERVICE_HOST,
# HOST_IP) come from stack.sh.
# shellcheck disable=SC2154

INSTANCEHA_XTRACE=$(set +o | grep xtrace)
set +o xtrace

function instanceha_bin {
    # The console script beside DevStack's python (its global venv).
    if declare -F get_python_exec_prefix >/dev/null; then
        echo "$(get_python_exec_prefix)/instanceha"
    else
        echo instanceha
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
    chmod 0640 "$INSTANCEHA_CONF"
}

function start_instanceha {
    local bin
    bin=$(instanceha_bin)
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

if is_service_enabled instanceha; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing instanceha"
        install_instanceha
    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring instanceha"
        configure_instanceha
    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Starting instanceha"
        start_instanceha
    fi
    if [[ "$1" == "unstack" ]]; then
        stop_instanceha
    fi
    if [[ "$1" == "clean" ]]; then
        cleanup_instanceha
    fi
fi

$INSTANCEHA_XTRACE
