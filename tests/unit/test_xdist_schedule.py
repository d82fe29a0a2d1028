# SPDX-License-Identifier: Apache-2.0
"""The units of work tests/conftest.py's xdist scheduler hands out first
name what is there: a shared set-up or a test module of this tree (a
renamed module would otherwise quietly lose its place).
"""

import os

from tests import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_longest_units_name_shared_setups_or_modules():
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)
    for unit in conftest.LONGEST_FIRST:
        if unit in conftest.SHARED_SETUPS:
            continue
        assert unit.startswith('tests/') and unit.endswith('.py'), unit
        assert os.path.isfile(os.path.join(ROOT, unit)), unit
