# SPDX-License-Identifier: Apache-2.0
"""Our commands start without eventlet's deprecation banner, and a clean
stop does not print py-amqp's warning about the broker's cancel notice
(issue #19).
"""

import logging
import subprocess
import sys

import pytest

from cyborg.common import config

COMMANDS = ['cyborg.cmd.conductor', 'cyborg.cmd.agent', 'cyborg.cmd.api',
            'cyborg.cmd.manage', 'cyborg.cmd.status', 'cyborg_aio.cli']


@pytest.mark.parametrize('module', COMMANDS)
def test_no_eventlet_banner(module):
    # -W default: the warning is shown unless our filter comes first.
    # Importing oslo.messaging's server module is what loads oslo.service's
    # eventlet backend.
    result = subprocess.run(
        [sys.executable, '-W', 'default', '-c',
         'import %s; import oslo_messaging.server' % module],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert 'Eventlet is deprecated' not in result.stderr


def _record(method):
    return logging.LogRecord(
        'amqp', logging.WARNING, __file__, 1, 'Received method %s during '
        'closing channel %s. This method will be ignored', (method, 1), None)


def test_the_cancel_notice_while_closing_is_not_logged():
    quiet = config.CancelWhileClosing()
    assert not quiet.filter(_record((60, 30)))      # Basic.Cancel
    assert quiet.filter(_record((60, 60)))          # Basic.Deliver: kept


def test_rabbit_listeners_notice_a_stop_within_a_second():
    from oslo_config import cfg

    from cyborg.conf import opts
    from cyborg import rpc
    conf = cfg.ConfigOpts()
    opts.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    rabbit = conf.oslo_messaging_rabbit
    assert rabbit.heartbeat_rate == 3          # the API keeps the library's
    rpc.quick_stop_defaults(conf)
    # The driver's poll timeout: threshold / rate / 2.
    assert rabbit.heartbeat_timeout_threshold / rabbit.heartbeat_rate / 2 \
        <= 1.0


def _reset_failure(exc):
    try:
        raise exc
    except Exception:
        return logging.LogRecord(
            'sqlalchemy.pool.impl.QueuePool', logging.ERROR, __file__, 1,
            'Exception during reset or similar', (), sys.exc_info())


class OperationalError(Exception):
    """Stands in for pymysql.err.OperationalError (same name)."""


def test_a_lost_connection_reset_is_not_a_traceback_per_connection():
    quiet = config.ResetOfLostConnection()
    assert not quiet.filter(_reset_failure(OperationalError(
        2013, 'Lost connection to MySQL server during query')))
    assert quiet.filter(_reset_failure(ValueError('something else')))


def test_the_filters_sit_on_the_loggers_that_emit(caplog):
    config.quiet_library_logs()
    pool = logging.getLogger('sqlalchemy.pool.impl.QueuePool')
    with caplog.at_level(logging.ERROR):
        for exc in (OperationalError(2013, 'Lost connection'),
                    ValueError('something else')):
            try:
                raise exc
            except Exception:
                pool.error('Exception during reset or similar',
                           exc_info=True)
    assert [r.exc_info[0] for r in caplog.records] == [ValueError]
