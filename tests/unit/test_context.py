# SPDX-License-Identifier: Apache-2.0
"""cyborg.context.RequestContext.from_environ: made once per identity,
the same context oslo.context would make for every request.
"""

from oslo_context import context as oslo_context
import pytest

from cyborg import context

ENVIRONS = [
    {},
    {'HTTP_X_ROLES': 'admin,service', 'HTTP_X_PROJECT_ID': 'p1',
     'HTTP_X_USER_ID': 'u1'},
    {'HTTP_X_ROLES': ' Member , reader', 'HTTP_X_TENANT_ID': 'p2',
     'HTTP_X_USER': 'u2', 'HTTP_X_IS_ADMIN_PROJECT': 'False',
     'HTTP_X_SERVICE_ROLES': 'service', 'HTTP_X_AUTH_TOKEN': 'tok',
     'HTTP_X_PROJECT_DOMAIN_ID': 'd', 'HTTP_OPENSTACK_SYSTEM_SCOPE': 'all'},
    {'HTTP_X_ROLE': 'manager', 'HTTP_X_PROJECT_ID': 'p3'},
]


def _made_anew(environ):
    # oslo.context's own from_environ, without the per-identity copy.
    return oslo_context.RequestContext.from_environ.__func__(
        context.RequestContext, environ)


def _policy_values(ctx):
    values = ctx.to_policy_values()
    assert len(values) == 13
    return tuple(tuple(v) if isinstance(v, list) else v for v in (
        values[k] for k in (
            'user_id', 'user_domain_id', 'system_scope', 'domain_id',
            'project_id', 'project_domain_id', 'roles', 'is_admin_project',
            'service_user_id', 'service_user_domain_id',
            'service_project_id', 'service_project_domain_id',
            'service_roles')))


@pytest.mark.parametrize('environ', ENVIRONS)
def test_same_as_made_anew(environ):
    for request_id in ('req-1', 'req-2'):
        env = dict(environ, **{'openstack.request_id': request_id,
                               'openstack.global_request_id': 'req-g'})
        ctx = context.RequestContext.from_environ(env)
        assert oslo_context.get_current() is ctx
        fresh = _made_anew(env)
        assert ctx.to_dict() == fresh.to_dict()
        assert ctx.request_id == request_id
        assert ctx.is_admin == fresh.is_admin
        assert ctx.is_service == fresh.is_service
        assert ctx.policy_key() == _policy_values(fresh)


def test_a_copy_per_request():
    env = dict(ENVIRONS[1])
    first = context.RequestContext.from_environ(env)
    first.roles.append('extra')
    first.project_id = 'changed'
    second = context.RequestContext.from_environ(env)
    assert second is not first
    assert 'extra' not in second.roles
    assert second.project_id == 'p1'
    assert second.request_id != first.request_id
