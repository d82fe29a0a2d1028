# SPDX-License-Identifier: Apache-2.0
"""etc/cyborg/api-paste.ini builds the pipeline the code builds."""

import configparser
import os

import pytest
import webob

from cyborg.api import app
from cyborg.api import pipeline
from cyborg.conf import CONF

INI = os.path.join(os.path.dirname(__file__), '..', '..', 'etc', 'cyborg',
                   'api-paste.ini')
_VOLATILE = {'x-openstack-request-id', 'openstack-request-id',
             'x-compute-request-id', 'content-length'}


def _answer(wsgi, path, **headers):
    response = webob.Request.blank(path, headers=headers).get_response(wsgi)
    kept = sorted((k.lower(), v) for k, v in response.headerlist
                  if k.lower() not in _VOLATILE)
    return response.status_int, kept, response.json_body


def _from_file():
    CONF.set_override('api_paste_config', os.path.abspath(INI), group='api')
    return pipeline.load(CONF)


def _keystone():
    CONF.set_override('auth_strategy', 'keystone', group='api')
    with pytest.raises(RuntimeError):    # registers [keystone_authtoken]
        app.setup_app(CONF)
    CONF.set_override('www_authenticate_uri', 'http://keystone.invalid',
                      group='keystone_authtoken')


def test_file_lists_the_steps_of_the_code_in_its_order():
    ini = configparser.ConfigParser()
    ini.read(INI)
    section = ini['composite:cyborg-api']
    code = [name for name, _step in app.STEPS]
    for strategy, auth in (('noauth', 'noauth'), ('keystone', 'authtoken')):
        names = section[strategy].split()
        assert names[-1] == 'cyborg'
        steps = [ini['filter:' + name]['step'] for name in names[:-1]]
        assert steps == code[:-1] + [auth], strategy


def test_without_the_option_the_code_builds_it():
    built = pipeline.load(CONF)
    assert _answer(built, '/v2') == _answer(app.setup_app(CONF), '/v2')


@pytest.mark.parametrize('path', ['/', '/v2'])
def test_noauth_file_serves_like_code(path):
    status, headers, body = _answer(_from_file(), path)
    assert status == 200
    assert (status, headers, body) == _answer(app.setup_app(CONF), path)


@pytest.mark.parametrize('path', ['/', '/v2'])
def test_keystone_file_serves_versions_like_code(path):
    _keystone()
    status, headers, body = _answer(_from_file(), path)
    assert status == 200
    assert (status, headers, body) == _answer(app.setup_app(CONF), path)


def test_keystone_file_asks_for_a_token():
    _keystone()
    status, headers, body = _answer(_from_file(),
                                    '/v2/accelerator_requests')
    assert status == 401
    assert 'www-authenticate' in dict(headers)
    assert _answer(app.setup_app(CONF), '/v2/accelerator_requests')[0] == 401


def test_metrics_step_follows_its_option():
    CONF.set_override('metrics_enabled', False, group='api')
    status, _headers, body = _answer(_from_file(), '/metrics')
    assert status == 404
    assert body == _answer(app.setup_app(CONF), '/metrics')[2]


def test_unknown_step_is_refused():
    with pytest.raises(ValueError, match='unknown step'):
        pipeline.filter_factory({}, step='nope')


def test_missing_file_is_refused():
    CONF.set_override('api_paste_config', '/nonexistent/api-paste.ini',
                      group='api')
    with pytest.raises(RuntimeError, match='no file'):
        pipeline.load(CONF)
