# SPDX-License-Identifier: Apache-2.0
"""docs/openapi.yaml fuzzed with schemathesis against the app in-process.

Every documented operation gets schema-derived requests, valid and
invalid (positive and negative generation, boundary values, undeclared
content types), plus the document's examples; every answer must be a
non-5xx that conforms to the document (status code, content type, body
schema). Generation is derandomized, so a run is repeatable:

    python -m pytest tests/fuzz                      # 10 per operation
    CYBORG_FUZZ_EXAMPLES=500 python -m pytest tests/fuzz/test_openapi_fuzz.py

(CYBORG_FUZZ_BACKENDS=sqlite,mysql,postgresql for the other databases.)
"""

import os

import hypothesis
import schemathesis
from schemathesis import checks
from schemathesis.specs.openapi import checks as openapi_checks

from tests.fuzz import conftest

DOC_PATH = os.path.join(os.path.dirname(__file__), '..', '..', 'docs',
                        'openapi.yaml')
SCHEMA = schemathesis.openapi.from_path(DOC_PATH)

CHECKS = [checks.not_a_server_error,
          openapi_checks.status_code_conformance,
          openapi_checks.content_type_conformance,
          openapi_checks.response_schema_conformance]


class _Target:
    """The app under test, swapped per test; schemathesis sends every
    request of a case (its probes too) to this one WSGI callable.
    """

    def __init__(self):
        self.app = None
        self.operation = None
        self.server_errors = []

    def __call__(self, environ, start_response):
        def recording_start_response(status, headers, exc_info=None):
            code = int(status[:3])
            conftest.record(self.operation, code)
            if code >= 500:
                self.server_errors.append('%s %s?%s → %s' % (
                    environ['REQUEST_METHOD'], environ['PATH_INFO'],
                    environ.get('QUERY_STRING', ''), status))
            return start_response(status, headers, exc_info)
        return self.app(environ, recording_start_response)


TARGET = _Target()
SCHEMA.app = TARGET


@SCHEMA.parametrize()
@hypothesis.settings(
    max_examples=conftest.EXAMPLES, derandomize=True, database=None,
    deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
def test_no_server_errors_and_answers_conform(case, seeded_api):
    TARGET.app = seeded_api
    TARGET.operation = case.operation.label
    TARGET.server_errors = []
    response = case.call()
    case.validate_response(response, checks=CHECKS)
    assert not TARGET.server_errors
