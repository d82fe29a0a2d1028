# SPDX-License-Identifier: Apache-2.0
"""Fuzzing fixtures: the API on a seeded database, and the run's figures.

CYBORG_FUZZ_EXAMPLES sets the examples per operation (and per property
test), CYBORG_FUZZ_BACKENDS the databases the OpenAPI fuzz runs on
(comma-separated; sqlite by default), CYBORG_FUZZ_AS who calls (admin,
member, nova; admin by default). The figures (operations, requests,
5xx answers) are printed at the end of the run.
"""

import collections
import os

import pytest

from cyborg.api import app as api_app
from cyborg.conf import CONF
from tests import dbs
from tests.functional import seed

EXAMPLES = int(os.environ.get('CYBORG_FUZZ_EXAMPLES', '10'))
BACKENDS = os.environ.get('CYBORG_FUZZ_BACKENDS', 'sqlite').split(',')
# Who sends the requests: noauth identity headers (none: an admin with
# the service role, so that every operation is reachable).
IDENTITIES = {
    'admin': {},
    'member': {'HTTP_X_ROLES': 'member', 'HTTP_X_USER_ID': 'fuzzer',
               'HTTP_X_PROJECT_ID': seed.BOUND_PROJECT},
    'nova': {'HTTP_X_ROLES': 'member', 'HTTP_X_USER_ID': 'fuzzer',
             'HTTP_X_SERVICE_ROLES': 'service',
             'HTTP_X_PROJECT_ID': seed.BOUND_PROJECT},
}
AS = os.environ.get('CYBORG_FUZZ_AS', 'admin').split(',')

FIGURES = collections.Counter()
OPERATIONS = set()


def record(operation, status):
    OPERATIONS.add(operation)
    FIGURES['requests'] += 1
    if status >= 500:
        FIGURES['5xx'] += 1


@pytest.fixture(params=[(backend, who) for backend in BACKENDS
                        for who in AS],
                ids=lambda p: '%s-%s' % p if len(AS) > 1 else p[0])
def seeded_api(request):
    """The noauth app, called as CYBORG_FUZZ_AS says, on a migrated
    database holding the gabbi inventory.
    """
    backend, who = request.param
    try:
        db = dbs.shared(backend)
    except dbs.Unavailable as e:
        dbs.unavailable(str(e))
    db.activate()
    db.truncate()
    seed.inventory()
    app = api_app.setup_app(CONF)

    def as_identity(environ, start_response):
        environ.update(IDENTITIES[who])
        return app(environ, start_response)
    return as_identity


def pytest_terminal_summary(terminalreporter):
    if FIGURES['requests']:
        terminalreporter.write_line(
            'fuzz: %d operations, %d requests, %d answered 5xx '
            '(%d examples per operation, databases: %s, as: %s)'
            % (len(OPERATIONS), FIGURES['requests'], FIGURES['5xx'],
               EXAMPLES, ','.join(BACKENDS), ','.join(AS)))
