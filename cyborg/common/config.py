# SPDX-License-Identifier: Apache-2.0
"""Configuration and logging set-up shared by every process's start-up."""

import warnings

# oslo.messaging imports oslo.service, whose default backend module imports
# (never monkey-patches) eventlet, which warns on import. We use threads only.
warnings.filterwarnings('ignore', message='(?s).*Eventlet is deprecated')

from oslo_log import log  # noqa: E402

from cyborg.conf import CONF  # noqa: E402

# Chatty libraries, quieter by default ([DEFAULT] default_log_levels).
_QUIET = ['alembic.runtime.plugins=WARN', 'routes=INFO', 'cheroot=WARN',
          'placement.requestlog=WARN']

_LOGGING_SET_UP = False


def parse_args(argv=None, config_files=None, log_to_stderr=False):
    """Parse oslo options and set up logging once per process.

    config_files=None searches the default places (/etc/cyborg/cyborg.conf,
    ...); [] reads only the files named in argv (--config-file).
    log_to_stderr keeps stdout for the command's own output (oslo.log
    otherwise logs to stdout when no log file is set).
    """
    global _LOGGING_SET_UP
    if not _LOGGING_SET_UP:
        log.register_options(CONF)
        log.set_defaults(default_log_levels=log.get_default_log_levels()
                         + _QUIET)
        if log_to_stderr:
            CONF.set_default('use_stderr', True)
    CONF(argv if argv is not None else [], project='cyborg',
         default_config_files=config_files)
    if not _LOGGING_SET_UP:
        log.setup(CONF, 'cyborg')
        _LOGGING_SET_UP = True
