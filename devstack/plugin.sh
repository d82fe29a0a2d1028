# shellcheck shell=bash source-path=SCRIPTDIR
# plugin.sh: devstack entry point for cyborg-gpu.
#
#   [[local|localrc]]
#   enable_plugin cyborg-gpu <repository URL>
#
# devstack sources this file as `source plugin.sh MODE PHASE` after sourcing
# devstack/settings; the plugin directory is ${CYBORG_PLUGIN_DIR}.

CYBORG_PLUGIN_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/cyborg
source "$CYBORG_PLUGIN_DIR/lib/cyborg"

if is_service_enabled cyborg-api cyborg-cond cyborg-agent; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing cyborg-gpu"
        install_cyborg

    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring cyborg-gpu"
        configure_cyborg
        if is_service_enabled key; then
            create_cyborg_accounts
        fi
        if [[ "$CYBORG_CONFIGURE_NOVA" == "True" ]] && is_service_enabled nova n-api n-cpu; then
            configure_nova_for_cyborg
        fi
        if is_service_enabled cyborg-api cyborg-cond; then
            init_cyborg
        fi

    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Starting cyborg-gpu"
        start_cyborg
        if [[ "$CYBORG_CREATE_SAMPLES" == "True" ]] && is_service_enabled cyborg-api && is_service_enabled n-api; then
            create_cyborg_samples
        fi
    fi

    if [[ "$1" == "unstack" ]]; then
        stop_cyborg
    fi

    if [[ "$1" == "clean" ]]; then
        cleanup_cyborg
    fi
fi
