# SPDX-License-Identifier: Apache-2.0
"""Configuration and logging set-up shared by every process's start-up."""

import logging
import os
import sys
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


def parse_args(argv=None, config_files=None, log_to_stderr=False,
               log_file=None, stderr_level=None):
    """Parse oslo options and set up logging once per process.

    config_files=None searches the default places (/etc/cyborg/cyborg.conf,
    ...); [] reads only the files named in argv (--config-file).
    log_to_stderr keeps stdout for the command's own output (oslo.log
    otherwise logs to stdout when no log file is set).
    log_file: the default of [DEFAULT] log_file (a config file may name
    another). stderr_level (e.g. logging.WARNING): the terminal gets only
    records at or above it, unless --debug; the log file gets them all.
    """
    global _LOGGING_SET_UP
    if not _LOGGING_SET_UP:
        log.register_options(CONF)
        log.set_defaults(default_log_levels=log.get_default_log_levels()
                         + _QUIET)
        if log_to_stderr:
            CONF.set_default('use_stderr', True)
        if log_file:
            CONF.set_default('log_file', log_file)
    CONF(argv if argv is not None else [], project='cyborg',
         default_config_files=config_files)
    if not _LOGGING_SET_UP:
        log.setup(CONF, 'cyborg')
        _LOGGING_SET_UP = True
        if stderr_level is not None and not CONF.debug:
            _limit_terminal(stderr_level)


def _limit_terminal(level):
    """Raise the level of the root logger's terminal handlers (not its
    file handlers) to `level`.
    """
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler, logging.FileHandler) and getattr(
                handler, 'stream', None) in (sys.stderr, sys.stdout):
            handler.setLevel(level)


def log_file_path():
    """The log file oslo.log writes to, or None."""
    if not CONF.log_file:
        return None
    return os.path.join(CONF.log_dir, CONF.log_file) if CONF.log_dir \
        else os.path.abspath(CONF.log_file)
