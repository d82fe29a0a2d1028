# SPDX-License-Identifier: Apache-2.0
"""Schema migrations (alembic), run by `cyborg-manage db sync`."""

import os

from alembic import command
from alembic import config as alembic_config
from alembic import migration as alembic_migration

from cyborg.db import api

_SCRIPTS = os.path.join(os.path.dirname(__file__), 'migrations')


def _config(connection):
    cfg = alembic_config.Config()
    cfg.set_main_option('script_location', _SCRIPTS)
    cfg.attributes['connection'] = connection
    return cfg


def upgrade(revision='head', engine=None):
    engine = engine or api.get_engine()
    with engine.begin() as connection:
        command.upgrade(_config(connection), revision)


def version(engine=None):
    engine = engine or api.get_engine()
    with engine.connect() as connection:
        return alembic_migration.MigrationContext.configure(
            connection).get_current_revision()


def head():
    """The newest revision the code knows."""
    from alembic import script
    return script.ScriptDirectory(_SCRIPTS).get_current_head()
