# SPDX-License-Identifier: Apache-2.0
"""Every option the service reads, grouped as in cyborg.conf.

`list_opts` feeds oslo-config-generator (etc/cyborg/cyborg.conf.sample).
"""

import socket

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_privsep import priv_context

from cyborg.conf import agent

default_opts = [
    cfg.StrOpt('host', default=socket.gethostname(),
               sample_default='<hostname>',
               help='Name of this host: the agent RPC server name and the '
                    'default hypervisor nodename used to find the compute '
                    'node resource provider.'),
    cfg.StrOpt('state_path', default='/var/lib/cyborg',
               help='Directory for state files (SQLite database in the '
                    'embedded mode).'),
]

api_opts = [
    cfg.HostAddressOpt('host_ip', default='127.0.0.1',
                       help='Address the API server listens on.'),
    cfg.PortOpt('port', default=6666, help='Port the API server listens on.'),
    cfg.IntOpt('api_workers', min=1,
               help='Number of API worker processes for cyborg-api; unset, '
                    'one per CPU the process may run on.'),
    cfg.StrOpt('auth_strategy', default='keystone',
               choices=[('keystone',
                         'Validate tokens with keystonemiddleware.'),
                        ('noauth',
                         'No token validation; identity headers are '
                         'trusted, absent ones mean an admin with the '
                         'service role.')],
               help='How API requests are authenticated.'),
    cfg.StrOpt('noauth_project_id', default='cyborg-admin-project',
               help='With auth_strategy=noauth, the project a request acts '
                    'in when it sends no identity headers.'),
    cfg.URIOpt('public_endpoint',
               help='Base URL used in links, e.g. '
                    'https://cloud.example.org/accelerator. Defaults to the '
                    'URL the request came in on.'),
    cfg.IntOpt('max_limit', default=1000, min=1,
               help='Largest number of items a list returns at once.'),
    cfg.IntOpt('max_request_body_size', default=1048576, min=1024,
               help='Largest request body, in bytes, the API reads; a '
                    'larger one is refused with 413 before it is read '
                    '(by its Content-Length, or as soon as a chunked body '
                    'passes the limit).'),
    cfg.StrOpt('api_paste_config',
               help='A paste.deploy file describing the middleware '
                    'pipeline (e.g. /etc/cyborg/api-paste.ini); its '
                    'cyborg-api section is served. Unset: the same '
                    'pipeline is built in code.'),
    cfg.StrOpt('gpu_profile_compat', default='off',
               choices=[('off', 'Store device profiles as sent.'),
                        ('nvidia',
                         'Translate Cyborg-style NVIDIA groups at profile '
                         'creation: resources:PGPU=1 with '
                         'trait:CUSTOM_NVIDIA_<product id>, and '
                         'resources:VGPU=1 with '
                         'trait:CUSTOM_NVIDIA_<product id>_<vGPU type>, '
                         'become the nvidia driver\'s whole-GPU and vGPU '
                         'groups (the group as sent is kept in '
                         'accel:cyborg_group).')],
               help='Device profiles written for Cyborg\'s GPU driver, '
                    'for a cloud whose NVIDIA GPUs the nvidia driver '
                    'reports. Leave off where GPUs are reported as PGPU '
                    '(the fake or pci driver). See "Compatibility with '
                    'Cyborg profiles" in the API reference.'),
    cfg.BoolOpt('metrics_enabled', default=True,
                help='Serve Prometheus metrics (request counts and '
                     'latencies, ARQs by state) at GET /metrics. The '
                     'endpoint needs no token, as Prometheus scrapes '
                     'usually do: restrict it at the proxy or load '
                     'balancer.'),
]

conductor_opts = [
    cfg.FloatOpt('bind_sweep_interval', default=10.0, min=0.1,
                 help='Seconds between two passes of the conductor\'s '
                      'sweep, which delivers pending Nova events and '
                      're-drives ARQs no conductor picked up.'),
    cfg.FloatOpt('bind_stale_after', default=30.0, min=0.1,
                 help='Seconds an ARQ may stay in BindStarted: the sweep '
                      're-drives one no conductor holds after this long '
                      '(its bind message was lost: the broker or the '
                      'database was down), and `cyborg-manage arq '
                      'list-stuck` and cyborg-status report every ARQ '
                      'still binding after it.'),
    cfg.FloatOpt('heartbeat_interval', default=2.0, min=0.1,
                 help='Seconds between two heartbeats of a conductor in '
                      'the database; each also takes over the binds of '
                      'conductors that stopped heartbeating.'),
    cfg.FloatOpt('heartbeat_timeout', default=6.0, min=0.2,
                 help='Seconds without a heartbeat after which a '
                      'conductor counts as dead and a live one takes over '
                      'the binds it held. Longer than heartbeat_interval '
                      'plus the clock difference between conductor hosts.'),
    cfg.FloatOpt('bind_timeout', default=300.0, min=1,
                 help='Seconds from Nova\'s bind request after which a '
                      'bind whose agent does not answer fails (with the '
                      'reason in the ARQ\'s state_reason); until then the '
                      'conductor asks the agent again with a back-off. '
                      'Set it to Nova\'s [DEFAULT] arq_binding_timeout.'),
    cfg.FloatOpt('prepare_batch_wait', default=0.5, min=0.0, max=30.0,
                 help='Seconds an agent waits for the prepares of one '
                      'batch (the ARQs of one host claimed together, sent '
                      'in one prepare_batch RPC) before it answers with '
                      'those that ended; the conductor then asks for each '
                      'one still running on its own, so a slow prepare '
                      'holds back the others of its batch for this long '
                      'at most. Keep it well below [DEFAULT] '
                      'rpc_response_timeout.'),
]

upgrade_levels_opts = [
    cfg.StrOpt('conductor',
               help='Highest conductor RPC API version to send, while '
                    'API servers or agents run newer code than the '
                    'conductors (e.g. 1.2 while conductors still run a '
                    'release that speaks 1.2). Unset: the newest. Clear '
                    'it once every conductor is upgraded.'),
    cfg.StrOpt('agent',
               help='Highest agent RPC API version to send, while '
                    'conductors or API servers run newer code than the '
                    'agents (e.g. 1.1 while agents still run a release '
                    'without prepare_batch: each ARQ is then prepared '
                    'with its own RPC). Unset: the newest. Clear it once '
                    'every agent is upgraded.'),
]

CONF_GROUPS = {
    'api': api_opts,
    'conductor': conductor_opts,
    'upgrade_levels': upgrade_levels_opts,
    **agent.GROUPS,
}


def register_opts(conf):
    conf.register_opts(default_opts)
    for group, group_opts in CONF_GROUPS.items():
        conf.register_opts(group_opts, group=group)
    # transport_url and friends, so config files and overrides can set them
    # before the first RPC client or server exists.
    import oslo_messaging
    oslo_messaging.set_transport_defaults('cyborg')
    from oslo_messaging import opts as messaging_opts
    for group, group_opts in messaging_opts.list_opts():
        if group is None:
            conf.register_opts(group_opts)
        elif group == 'oslo_messaging_rabbit':
            conf.register_opts(group_opts, group=group)
    # (The rabbit group too: cyborg.rpc.quick_stop_defaults sets one of
    # its defaults for the conductor and the agent.)
    from oslo_db import options as db_options
    # No default [database] connection: a process started without a config
    # says so (cyborg.db.api.NotConfigured) instead of creating a database
    # in whatever directory it was started from.
    db_options.set_defaults(conf)
    for group in ('placement', 'nova'):
        ks_loading.register_session_conf_options(conf, group)
        ks_loading.register_auth_conf_options(conf, group)
        ks_loading.register_adapter_conf_options(conf, group)
    conf.set_default('service_type', 'placement', group='placement')
    conf.set_default('service_type', 'compute', group='nova')
    conf.set_default('valid_interfaces', ['internal', 'public'],
                     group='placement')
    conf.set_default('valid_interfaces', ['internal', 'public'], group='nova')


def set_library_defaults():
    """Our defaults for library options: oslo.middleware's CORS headers
    and methods (what the API speaks). The API sets them before building
    its CORS middleware; oslo-config-generator calls this too (entry point
    oslo.config.opts.defaults), so the sample shows them.
    """
    from oslo_middleware import cors
    cors.set_defaults(
        allow_headers=['X-Auth-Token', 'X-Openstack-Request-Id',
                       'OpenStack-API-Version', 'Content-Type'],
        expose_headers=['X-Openstack-Request-Id', 'OpenStack-API-Version',
                        'OpenStack-API-Minimum-Version',
                        'OpenStack-API-Maximum-Version'],
        allow_methods=['GET', 'PUT', 'POST', 'DELETE', 'PATCH'])


def _ks_opts(service_type):
    """Fresh keystoneauth options, with the defaults register_opts sets."""
    opts = (ks_loading.get_session_conf_options()
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options('password')
            + ks_loading.get_adapter_conf_options(include_deprecated=False))
    cfg.set_defaults(opts, service_type=service_type,
                     valid_interfaces=['internal', 'public'])
    return opts


def list_opts():
    """Options of our own groups, for the sample config generator."""
    return [
        ('DEFAULT', default_opts),
        ('api', api_opts),
        ('conductor', conductor_opts),
        ('upgrade_levels', upgrade_levels_opts),
        ('placement', _ks_opts('placement')),
        ('nova', _ks_opts('compute')),
        # The agent's privsep daemon (cyborg.drivers.nvidia.privileged):
        # helper_command, user, group, capabilities, ...
        ('nvidia_privsep', priv_context.OPTS),
    ] + [(group, opts) for group, opts in agent.GROUPS.items()]
