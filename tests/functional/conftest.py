# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the functional tests that need the package installed as a
user installs it (tests/installed.py).
"""

import pytest

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
