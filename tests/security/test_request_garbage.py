# SPDX-License-Identifier: Apache-2.0
"""Behind keystonemiddleware too, a request with a valid token leaves
nothing in reference cycles (tests/unit/test_request_garbage.py: the
app's own layers): the validation adds its own objects to the environ,
none of which keeps the environ.

A refused token does leave one: keystonemiddleware answers 401 through
webob's wsgify, which returns the HTTPUnauthorized it caught, and that
exception's traceback holds the frame that holds it. Library code, on
the path of refused requests only; not broken here.
"""

import pytest

from tests.security import fake_keystone
from tests.unit import test_request_garbage as garbage


@pytest.mark.parametrize('path, admin, member', [
    ('/v2/device_profiles', 200, 200),
    ('/v2/accelerator_requests', 200, 200),
    ('/v2/device_profiles/nothing-here', 404, 404),
    ('/v2/devices', 200, 403),
])
@pytest.mark.parametrize('who', [fake_keystone.ADMIN,
                                 fake_keystone.MEMBER_A])
def test_a_validated_request_leaves_no_cycles(keystone_api, path, admin,
                                              member, who):
    headers = {'X-Auth-Token': who.token}
    # The first call fills what is kept across requests (the service's
    # own token, the validated token's cache entry).
    garbage.unreachable_after(keystone_api, 'GET', path, headers=headers)
    status, left = garbage.unreachable_after(keystone_api, 'GET', path,
                                             headers=headers)
    assert status == (admin if who is fake_keystone.ADMIN else member)
    assert left == [], sorted({type(o).__name__ for o in left})
