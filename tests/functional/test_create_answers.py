# SPDX-License-Identifier: Apache-2.0
"""A POST's answer is what a GET of what it made answers, field for
field (timestamps to the microsecond the database keeps), on every
backend, with the rows returned by the INSERT or read back after it (the
insert_returning fixture); and a POST refused for a duplicate leaves
nothing written.
"""

import pytest
import sqlalchemy as sa

from cyborg.api import app as api_app
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import models
from tests import wsgi_calls

DP = models.DeviceProfile.__table__


@pytest.fixture
def app(insert_returning):
    return api_app.setup_app(CONF)


_call = wsgi_calls.call


def _profile(app, name, **fields):
    r = _call(app, 'POST', '/v2/device_profiles', [dict(
        {'name': name, 'groups': [{'resources:PGPU': '1'},
                                  {'resources:CUSTOM_A': '2'}]}, **fields)])
    assert r.status_int == 201, r.text
    return r.json


def test_profile_post_answers_what_get_answers(app):
    created = _profile(app, 'answered', description='as stored',
                       uuid='6d1f2a63-0c43-4e0f-9fd8-0d2b0a3b6e4c')
    r = _call(app, 'GET', '/v2/device_profiles/%s' % created['uuid'])
    assert r.status_int == 200
    assert r.json['device_profile'] == created
    assert created['uuid'] == '6d1f2a63-0c43-4e0f-9fd8-0d2b0a3b6e4c'
    assert created['created_at'] is not None


def test_arq_post_answers_what_get_answers(app):
    _profile(app, 'for-arqs')
    r = _call(app, 'POST', '/v2/accelerator_requests',
              {'device_profile_name': 'for-arqs'})
    assert r.status_int == 201, r.text
    created = r.json['arqs']
    assert [a['device_profile_group_id'] for a in created] == [0, 1, 1]
    for arq in created:
        r = _call(app, 'GET', '/v2/accelerator_requests/%s' % arq['uuid'])
        assert r.status_int == 200
        assert r.json == arq
    r = _call(app, 'GET', '/v2/accelerator_requests')
    assert r.json['arqs'] == created


def test_duplicate_profile_is_409_and_nothing_written(app):
    first = _profile(app, 'taken')
    for body in ({'name': 'taken', 'groups': [{'resources:PGPU': '1'}]},
                 {'name': 'other', 'uuid': first['uuid'],
                  'groups': [{'resources:PGPU': '1'}]}):
        r = _call(app, 'POST', '/v2/device_profiles', [body])
        assert r.status_int == 409, r.text
    r = _call(app, 'GET', '/v2/device_profiles')
    assert r.json['device_profiles'] == [first]
    with db_api.reader() as session:
        assert session.execute(
            sa.select(sa.func.count()).select_from(DP)).scalar() == 1
