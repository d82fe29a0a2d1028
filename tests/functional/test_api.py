# SPDX-License-Identifier: Apache-2.0
"""The API spec: every gabbit under gabbits/, once per database backend.

Test ids read `<backend>:<file>_<test name>`; a backend that cannot be
reached is skipped (CYBORG_TEST_REQUIRE_DBS=1 makes that a failure).
"""

import os

from gabbi import driver
from gabbi.driver import test_pytest  # noqa: F401  (the parametrized test)

from tests import dbs
from tests.functional import fixtures
from tests.functional import handlers

GABBITS = os.path.join(os.path.dirname(__file__), 'gabbits')


class _Collector:
    """Stands in for metafunc so the suites of all backends end up in one
    parametrize call (pytest allows only one per argument).
    """

    def __init__(self, metafunc):
        self.config = metafunc.config
        self.function = metafunc.function
        self.argvalues = []
        self.ids = []

    def parametrize(self, argnames, argvalues, ids):
        self.argvalues.extend(argvalues)
        self.ids.extend(ids)


def pytest_generate_tests(metafunc):
    collector = _Collector(metafunc)
    for backend in dbs.BACKENDS:
        driver.py_test_generator(
            GABBITS, intercept=fixtures.wsgi_app, test_loader_name=backend,
            fixture_module=fixtures.for_backend(backend),
            response_handlers=[handlers.FaultHandler], metafunc=collector)
    metafunc.parametrize('test, result', collector.argvalues,
                         ids=collector.ids)
