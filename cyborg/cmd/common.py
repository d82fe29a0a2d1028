"""Process start-up shared by the console scripts."""

from oslo_log import log

from cyborg.conf import CONF
from cyborg.db import api as db_api

_LOGGING_SET_UP = False


def parse_args(argv=None, config_files=None):
    global _LOGGING_SET_UP
    if not _LOGGING_SET_UP:
        log.register_options(CONF)
    CONF(argv if argv is not None else [], project='cyborg',
         default_config_files=config_files)
    if not _LOGGING_SET_UP:
        log.setup(CONF, 'cyborg')
        _LOGGING_SET_UP = True


def build_api(config_files=None):
    """Parse config, point the DB layer at [database] and build the app."""
    from cyborg.api import app
    parse_args([], config_files)
    db_api.configure()
    return app.setup_app()
