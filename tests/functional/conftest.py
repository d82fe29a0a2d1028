"""Drop the gabbi suites' throw-away databases when the session ends."""

from tests.functional import fixtures


def pytest_sessionfinish(session, exitstatus):
    fixtures.drop_databases()
