# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the race checks."""

import pytest

from tests.reliability import stack as race_stack


@pytest.fixture
def stack(database, placement_service):
    """The in-process service on each DB backend in turn."""
    s = race_stack.Stack(placement_service)
    yield s
    s.stop()
