# SPDX-License-Identifier: Apache-2.0
"""cyborg-aio stopped (Ctrl-C) while its demo still boots: one line on the
terminal, not the errors and tracebacks of the refused requests that
follow.
"""

import io
import logging

import pytest

from cyborg_aio import demo


def _boot_refused(stopped):
    def fake_run(*args):
        stopped.append(True)        # Ctrl-C: the services go away
        logging.getLogger('nova_cyborg_client.compute').error(
            'Failed to delete accelerator requests: connection refused')
        raise ConnectionRefusedError(111, 'Connection refused')
    return fake_run


def test_a_stop_under_the_demo_is_one_line(monkeypatch, caplog):
    stopped = []
    monkeypatch.setattr(demo, '_run', _boot_refused(stopped))
    out = io.StringIO()
    booted = demo.run(None, 'http://127.0.0.1:1/v2', 'http://127.0.0.1:2',
                      out, stopping=lambda: bool(stopped))
    assert booted is False
    assert out.getvalue() == 'demo: interrupted, cyborg-aio is stopping\n'
    assert not [r for r in caplog.records
                if r.name.startswith('nova_cyborg_client')]
    # The filter goes with the demo: later records are logged again.
    logging.getLogger('nova_cyborg_client.compute').error('later')
    assert [r.getMessage() for r in caplog.records] == ['later']


def test_failures_without_a_stop_are_not_hidden(monkeypatch, caplog):
    monkeypatch.setattr(demo, '_run', _boot_refused([]))
    out = io.StringIO()
    with pytest.raises(ConnectionRefusedError):
        demo.run(None, 'http://127.0.0.1:1/v2', 'http://127.0.0.1:2', out,
                 stopping=lambda: False)
    assert out.getvalue() == ''
    assert [r.getMessage() for r in caplog.records] == [
        'Failed to delete accelerator requests: connection refused']
