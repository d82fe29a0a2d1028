# SPDX-License-Identifier: Apache-2.0
"""The real OpenStack Placement service (openstack-placement), configured on
a private ConfigOpts so its options never mix with ours.

Placement keeps its own SQLite database in the state directory and creates
or upgrades its schema on start (`sync_on_startup`). It authenticates with
`noauth2`: a request must carry `X-Auth-Token: <user>[:<project>]`, and the
user `admin` is an admin (cyborg.common.ksa.NoAuth2 sends that). Or, with
auth_strategy `keystone`, behind keystonemiddleware configured by the
[keystone_authtoken] section of the config files given (our own).
"""

import os

from oslo_config import cfg
import sqlalchemy as sa


def build_conf(state_dir, auth_strategy='noauth2', config_files=()):
    from placement import conf as placement_conf

    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf.set_override('connection', 'sqlite:///%s' % os.path.join(
        state_dir, 'placement.sqlite'), group='placement_database')
    conf.set_override('sync_on_startup', True, group='placement_database')
    conf.set_override('auth_strategy', auth_strategy, group='api')
    conf.set_override('state_path', state_dir)
    # Only the files given: the embedded Placement never reads
    # /etc/placement. Options Placement does not know are ignored.
    args = []
    for path in config_files if auth_strategy == 'keystone' else ():
        args += ['--config-file', path]
    conf(args, project='placement', default_config_files=[])
    return conf


def load_app(conf):
    """The Placement WSGI app; migrates its database first.

    placement.db_api.configure() works once per process: one embedded
    Placement per process.
    """
    from placement import db_api
    from placement import deploy

    db_api.configure(conf)
    app = deploy.loadapp(conf)
    _writers_queue(db_api.placement_context_manager.writer.get_engine())
    return app


def _writers_queue(engine):
    """Placement's SQLite transactions begin IMMEDIATE.

    A deferred transaction that reads and then writes cannot upgrade its
    lock once another writer has committed since its read (WAL mode):
    SQLite answers "database is locked" at once, and Placement a 500,
    under concurrent trait and inventory updates. Taking the lock up
    front makes them queue, within the busy timeout, instead.

    Ours must run before oslo.db's own `begin` listener, which emits a
    plain BEGIN unless `in_transaction` is set. SQLAlchemy's engine events
    ignore `insert=True` (ConnectionEvents._listen passes no keywords on),
    so the engine's own listeners are taken off and put back after ours.
    """
    if engine.dialect.name != 'sqlite':
        return

    def begin(conn):
        if 'in_transaction' not in conn.info:
            conn.exec_driver_sql('BEGIN IMMEDIATE')
            conn.info['in_transaction'] = True

    others = list(engine.dispatch.begin.listeners)
    for fn in others:
        sa.event.remove(engine, 'begin', fn)
    sa.event.listen(engine, 'begin', begin)
    for fn in others:
        sa.event.listen(engine, 'begin', fn)
