# shellcheck shell=bash
# Stand-ins for the devstack functions the cyborg-gpu plugin calls. Each one
# appends a line to $STUB_LOG: its name, then its arguments, tab-separated.
# Those that devstack uses for their output print a fixed, recognisable value.

_stub_log() {
    local IFS=$'\t'
    printf '%s\n' "$*" >> "$STUB_LOG"
}

for _f in iniset inidelete iniadd setup_develop recreate_database \
          create_service_user get_or_create_role get_or_add_user_project_role \
          get_or_create_endpoint write_uwsgi_config remove_uwsgi_config \
          stop_process configure_keystone_authtoken_middleware \
          install_apache_uwsgi pip_install_gr sudo openstack_stub; do
    eval "$_f() { _stub_log $_f \"\$@\"; }"
done
unset _f

echo_summary() { :; }
die() { _stub_log die "$@"; exit 1; }
wait_for_service() { _stub_log wait_for_service "$@"; }
get_python_exec_prefix() { echo "$FAKE_BIN"; }
get_transport_url() { echo "rabbit://stackrabbit:secret@10.0.0.5:5672/"; }
database_connection_url() { echo "mysql+pymysql://root:secret@10.0.0.5/$1?charset=utf8"; }
get_or_create_service() { _stub_log get_or_create_service "$@"; echo "svc-0123"; }

# The real iniget reads the file; FAKE_OLD_UWSGI makes write_uwsgi_config look
# like devstack before 2024.2 (it wrote "wsgi-file = <argument>").
iniget() {
    _stub_log iniget "$@"
    if [[ -n "${FAKE_OLD_UWSGI:-}" && "$3" == "wsgi-file" ]]; then
        echo "cyborg.wsgi.api:application"
    fi
}

trueorfalse() {
    local default=$1 value=${!2:-}
    case "$value" in
        1|yes|Yes|YES|true|True|TRUE|on|On|ON) echo True ;;
        0|no|No|NO|false|False|FALSE|off|Off|OFF) echo False ;;
        *) echo "$default" ;;
    esac
}

# ENABLED_SERVICES is comma-separated, as in devstack; any match is enough.
is_service_enabled() {
    local s
    for s in "$@"; do
        [[ ",$ENABLED_SERVICES," == *",$s,"* ]] && return 0
    done
    return 1
}

enable_service() {
    _stub_log enable_service "$@"
    local s
    for s in "$@"; do
        is_service_enabled "$s" || ENABLED_SERVICES="$ENABLED_SERVICES,$s"
    done
}

# Like devstack's, run_process does nothing for a disabled service.
run_process() {
    is_service_enabled "$1" || return 0
    _stub_log run_process "$@"
}

# `openstack ... show` finds nothing, so the plugin creates what it shows.
openstack() {
    _stub_log openstack "$@"
    [[ " $* " != *" show "* ]]
}
