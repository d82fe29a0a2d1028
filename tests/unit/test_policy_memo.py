# SPDX-License-Identifier: Apache-2.0
"""cyborg.policy's remembered decisions: the same answers as oslo.policy's
enforce, asked once per (action, target, credentials).
"""

import os
from unittest import mock

from oslo_policy import policy as oslo_policy
import pytest

from cyborg.common import exception
from cyborg.conf import CONF
from cyborg import context
from cyborg import policy

ADMIN = dict(roles=['admin', 'service'], project_id='p1', user_id='u1')
MEMBER = dict(roles=['member'], project_id='p2', user_id='u2')


@pytest.fixture
def enforcer():
    policy.reset()
    yield policy.get_enforcer()
    policy.reset()


@pytest.mark.parametrize('who', [ADMIN, MEMBER])
def test_check_is_enforce_and_remembered(enforcer, who):
    ctx = context.RequestContext(**who)
    target = {'project_id': ctx.project_id}
    expected = bool(enforcer.enforce('cyborg:arq:delete_bound', target, ctx))
    with mock.patch.object(enforcer, 'enforce',
                           wraps=enforcer.enforce) as enforce:
        for _ in range(3):
            assert enforcer.check('cyborg:arq:delete_bound', target,
                                  ctx) is expected
            assert enforcer.check('cyborg:arq:delete_bound', target,
                                  context.RequestContext(**who)) is expected
    assert enforce.call_count == 1


def test_authorize_keys_the_own_target_by_the_credentials(enforcer):
    for who, allowed in ((ADMIN, True), (MEMBER, False), (ADMIN, True)):
        ctx = context.RequestContext(**who)
        if allowed:
            policy.authorize(ctx, 'cyborg:device_profile:create')
        else:
            with pytest.raises(exception.PolicyNotAuthorized) as e:
                policy.authorize(ctx, 'cyborg:device_profile:create')
            assert e.value.code == 403


def test_invalid_scope_raised_by_check_only(enforcer):
    ctx = context.RequestContext(**ADMIN)
    target = {'project_id': 'p1'}
    refusal = oslo_policy.InvalidScope('cyborg:arq:delete_bound', ['project'],
                                       'system')
    with mock.patch.object(enforcer, 'enforce', side_effect=refusal):
        for _ in range(2):
            with pytest.raises(oslo_policy.InvalidScope):
                enforcer.check('cyborg:arq:delete_bound', target, ctx)
        assert enforcer.allowed('cyborg:arq:delete_bound', target,
                                ctx) is False


def _rule(path, check, at):
    """Write `check` as the profile create rule into `path`, marked as
    modified at `at` (oslo.policy notices an edit by the file's mtime).
    """
    path.write_text('"cyborg:device_profile:create": "%s"\n' % check)
    os.utime(path, (at, at))


def test_an_edited_policy_file_applies_without_a_restart(tmp_path):
    path = tmp_path / 'policy.yaml'
    _rule(path, '!', 1000000)
    CONF.set_override('policy_file', str(path), group='oslo_policy')
    policy.reset()
    enforcer = policy.get_enforcer()
    ctx = context.RequestContext(**ADMIN)
    assert enforcer.check('cyborg:device_profile:create', {}, ctx) is False
    _rule(path, '@', 2000000)
    # Within RECHECK_SECONDS the file is not looked at again.
    assert enforcer.check('cyborg:device_profile:create', {}, ctx) is False
    enforcer._next_check = 0.0
    assert enforcer.check('cyborg:device_profile:create', {}, ctx) is True


def test_a_look_that_finds_no_change_keeps_the_decisions(enforcer):
    ctx = context.RequestContext(**MEMBER)
    target = {'project_id': ctx.project_id}
    with mock.patch.object(enforcer, 'enforce',
                           wraps=enforcer.enforce) as enforce, \
            mock.patch.object(oslo_policy.Enforcer, 'load_rules',
                              autospec=True,
                              side_effect=oslo_policy.Enforcer.load_rules
                              ) as looked:
        for _ in range(3):
            enforcer._next_check = 0.0
            enforcer.check('cyborg:arq:delete_bound', target, ctx)
    assert looked.call_count == 3
    assert enforce.call_count == 1
    # A rule set anew (what a reload that found an edit does) is not.
    enforcer.set_rules(dict(enforcer.rules))
    with mock.patch.object(enforcer, 'enforce',
                           wraps=enforcer.enforce) as enforce:
        enforcer.check('cyborg:arq:delete_bound', target, ctx)
    assert enforce.call_count == 1
