# SPDX-License-Identifier: Apache-2.0
"""Configuration and logging set-up shared by every process's start-up."""

import logging
import os
import sys

from oslo_log import log

from cyborg.conf import CONF

# Chatty libraries, quieter by default ([DEFAULT] default_log_levels).
_QUIET = ['alembic.runtime.plugins=WARN', 'routes=INFO', 'cheroot=WARN',
          'placement.requestlog=WARN']

_LOGGING_SET_UP = False


class ResetOfLostConnection(logging.Filter):
    """Drops SQLAlchemy's traceback for a pooled connection it could not
    roll back because the database server went away.

    During a database outage every connection handed back to the pool
    fails its reset; the pool discards it, the next checkout reconnects
    (pre-ping), and the conductor has already said once that the
    database is unreachable (cyborg.conductor.outage). Other reset
    failures are still logged.
    """

    def filter(self, record):
        if not record.getMessage().startswith(
                'Exception during reset or similar'):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        return not _lost_connection(exc)


def _lost_connection(exc):
    # The driver's own error (pymysql/psycopg2 OperationalError or
    # InterfaceError, a socket error), raised as the server is gone;
    # SQLAlchemy has not wrapped it yet at this point.
    return isinstance(exc, OSError) or type(exc).__name__ in (
        'OperationalError', 'InterfaceError')


# A filter applies to the records of the logger it is added to, not to
# those its children pass up: SQLAlchemy's pools log under their class.
_POOL_LOGGERS = ['sqlalchemy.pool.impl.%s' % name for name in (
    'QueuePool', 'AsyncAdaptedQueuePool', 'NullPool', 'SingletonThreadPool',
    'StaticPool', 'AssertionPool')]


def quiet_library_logs():
    """Add the filters above to the loggers that emit those records."""
    logging.getLogger('amqp').addFilter(CancelWhileClosing())
    for name in _POOL_LOGGERS:
        logging.getLogger(name).addFilter(ResetOfLostConnection())


class CancelWhileClosing(logging.Filter):
    """Drops py-amqp's warning about the broker's Basic.Cancel (method
    60, 30) arriving on a channel being closed.

    Stopping an RPC server, oslo.messaging deletes the server's fanout
    queue while its consumer is still registered; the broker then tells
    the consumer it was cancelled, and that notice crosses the channel's
    Close. AMQP 0.9.1 has the client discard it (py-amqp pull 280), so
    the warning printed on every clean stop says nothing is wrong.
    """

    def filter(self, record):
        return not record.getMessage().startswith(
            'Received method (60, 30) during closing channel')


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
        quiet_library_logs()
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
