# SPDX-License-Identifier: Apache-2.0
"""The API pipeline from a paste.deploy file ([api] api_paste_config).

The file's filters are the steps of cyborg.api.app.STEPS, by name, so
the file and the in-code builder share one implementation: a deployment
may drop, reorder or add filters, and gets ours unchanged otherwise.
Filters read the service's already parsed configuration (cyborg.conf);
the file only says which run, and in which order.
"""

import os

from paste import deploy

from cyborg.api import app as api_app
from cyborg.api import stack
from cyborg.common import config
from cyborg.conf import CONF
from cyborg.db import api as db_api

SECTION = 'cyborg-api'
# 'auth' follows [api] auth_strategy; a file names the one it wants.
_STEPS = dict(api_app.STEPS, noauth=api_app.noauth,
              authtoken=api_app.keystone_auth)


def app_factory(global_conf, **local_conf):
    """[app:...] the pecan application, without middleware."""
    return api_app._pecan_app()


def filter_factory(global_conf, step, **local_conf):
    """[filter:...] one of cyborg.api.app.STEPS, named by `step`."""
    try:
        build = _STEPS[step]
    except KeyError:
        raise ValueError('api-paste.ini: unknown step %r (one of %s)'
                         % (step, ', '.join(_STEPS)))
    return lambda app: build(app, CONF)


def pipeline_by_auth_strategy(loader, global_conf, **local_conf):
    """[composite:...] the pipeline named after [api] auth_strategy."""
    names = local_conf[CONF.api.auth_strategy].split()
    app = loader.get_app(names[-1])
    for name in reversed(names[:-1]):
        app = loader.get_filter(name)(app)
    # The default filters run as one layer (cyborg.api.stack); any other
    # arrangement as listed.
    return stack.fuse(app)


def load(conf=CONF):
    """The app from [api] api_paste_config, else the in-code pipeline."""
    path = conf.api.api_paste_config
    if not path:
        return api_app.setup_app(conf)
    if not os.path.isabs(path):
        path = conf.find_file(path) or os.path.abspath(path)
    if not os.path.exists(path):
        raise RuntimeError('[api] api_paste_config: no file %s' % path)
    return deploy.loadapp('config:' + path, name=SECTION)


def build_api(config_files=None):
    """Parse config, point the DB layer at [database] and build the app
    (from [api] api_paste_config when set).
    """
    config.parse_args([], config_files)
    db_api.configure()
    return load(CONF)
