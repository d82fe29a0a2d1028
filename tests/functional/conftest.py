# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the functional tests: the package installed as a user
installs it (tests/installed.py), and cyborg-aio processes.
"""

import pytest

from cyborg_harness import aio as harness_aio
from tests.functional import aio_common
from tests import installed as installed_mod


@pytest.fixture(scope='session')
def installed(tmp_path_factory):
    """A wheel of this checkout, installed with the `mysql` extra in a fresh
    virtualenv (built once per test session, ~45 s).
    """
    workdir = tmp_path_factory.mktemp('installed')
    wheel = installed_mod.build_wheel(str(workdir))
    venv = installed_mod.Venv(str(workdir / 'venv'), wheel)
    venv.wheel = wheel
    return venv


@pytest.fixture
def aio(tmp_path):
    """Starts cyborg-aio processes (the harness's aio mode) on one state
    directory and config file (host = aio_common.NODE); each is killed at
    the end if a test left it running.
    """
    state_dir = tmp_path / 'state'
    config_file = tmp_path / 'cyborg.conf'
    config_file.write_text('[DEFAULT]\nhost = %s\n' % aio_common.NODE)
    started = []

    def start(demo=False, host_spec=harness_aio.HOST_SPEC):
        # cyborg-aio as a user runs it (the harness's aio mode): stdout is
        # only the ready line (and the demo's), logs go to stderr.
        started.append(harness_aio.Aio(
            tmp_path, state_dir=state_dir, config_file=config_file,
            demo=demo, host_spec=host_spec, name='aio-%d' % len(started)))
        return started[-1]

    start.state_dir = state_dir
    yield start
    for process in started:
        process.kill()
