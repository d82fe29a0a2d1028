# SPDX-License-Identifier: Apache-2.0
"""Options of the Nova side, on a private ConfigOpts.

A private object, not oslo.config's global CONF: cyborg-aio runs this code
in the same process as the service, whose [placement] and [DEFAULT] options
mean other things.

[cyborg] carries keystoneauth's session and adapter options only, like
Nova's: no auth options, the caller's token is used (RequestContext).
[placement] does the same for the flow runner's scheduler and claims.
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

CYBORG_GROUP = 'cyborg'
PLACEMENT_GROUP = 'placement'

default_opts = [
    cfg.IntOpt('arq_binding_timeout', default=300, min=1,
               help='Timeout for Accelerator Request (ARQ) bind event '
                    'message arrival: seconds to wait, under one deadline '
                    'for all of an instance\'s ARQs, for the events saying '
                    'each ARQ bound or failed to bind. On expiry the build '
                    'is aborted.'),
]

scheduler_opts = [
    cfg.IntOpt('max_placement_results', default=1000, min=1,
               help='The `limit` sent with GET /allocation_candidates.'),
]


def register_opts(conf):
    conf.register_opts(default_opts)
    conf.register_opts(scheduler_opts, group='scheduler')
    for group, service_type in ((CYBORG_GROUP, 'accelerator'),
                                (PLACEMENT_GROUP, 'placement')):
        ks_loading.register_session_conf_options(conf, group)
        ks_loading.register_adapter_conf_options(conf, group)
        conf.set_default('service_type', service_type, group=group)
        conf.set_default('valid_interfaces', ['internal', 'public'],
                         group=group)


def adapter(context, group, conf=None, **kwargs):
    """A keystoneauth adapter for the service of option group `group`
    ([cyborg], [placement]), acting as `context`'s caller; errors come
    back as responses (raise_exc=False), no microversion bounds.
    """
    conf = conf or CONF
    auth = context.get_auth_plugin()
    session = ks_loading.load_session_from_conf_options(conf, group,
                                                        auth=auth)
    return ks_loading.load_adapter_from_conf_options(
        conf, group, session=session, auth=auth, min_version=None,
        max_version=None, raise_exc=False, **kwargs)


def new_conf():
    """A fresh, parsed option object (tests, CLI)."""
    conf = cfg.ConfigOpts()
    register_opts(conf)
    conf([], project='nova-cyborg-client', default_config_files=[])
    return conf


CONF = new_conf()
