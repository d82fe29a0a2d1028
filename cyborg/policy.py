# SPDX-License-Identifier: Apache-2.0
"""The policy enforcer and the one call handlers use to authorize."""

import threading
import time

from oslo_policy import _checks
from oslo_policy import policy

from cyborg.common import exception
from cyborg.conf import CONF
from cyborg import context as request_context
from cyborg import policies

_ENFORCER = None
_LOCK = threading.Lock()
# How often the policy file and directories are checked for changes.
RECHECK_SECONDS = 1.0
# Checks whose answer depends on nothing but the target, the credentials
# and the rules (not on, say, a remote server, as http: checks do).
_PURE = (_checks.TrueCheck, _checks.FalseCheck, _checks.RuleCheck,
         _checks.RoleCheck, _checks.GenericCheck)
_MAX_DECISIONS = 10000


def _pure(check):
    if isinstance(check, (_checks.AndCheck, _checks.OrCheck)):
        return all(_pure(c) for c in check.rules)
    if isinstance(check, _checks.NotCheck):
        return _pure(check.rule)
    return type(check) in _PURE


def _frozen(mapping):
    return tuple(sorted(
        (k, tuple(v) if isinstance(v, list) else v)
        for k, v in mapping.items()))


def _credentials(context):
    """The credentials oslo.policy decides on, as a key."""
    if type(context) is request_context.RequestContext:
        return context.policy_key()
    return _frozen(context.to_policy_values())


# The key of the default target, the caller's own project and user: both
# are part of the credentials' key.
_OWN = ('own',)


class Enforcer(policy.Enforcer):
    """oslo.policy's enforcer, cheaper per request.

    It looks for policy file changes at most once every RECHECK_SECONDS
    instead of on every check (a stat of the file and of each policy
    directory, a third of an authorization); an edited policy.yaml still
    applies without a restart. And while the rules stay the same it
    remembers each decision per (action, target, credentials), since
    oslo.policy inspects the signature of every check it evaluates: what
    it remembers is forgotten when a look for changes found one, not at
    every look. Rules with checks that ask elsewhere (http:) are never
    remembered.
    """

    _next_check = 0.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._forget()

    def _forget(self):
        self._decisions = {}
        self._memo_ok = None

    def load_rules(self, force_reload=False):
        now = time.monotonic()
        if force_reload or not self.rules or now >= self._next_check:
            # The rules change by being set (set_rules, which a reload
            # that found an edited file calls, forgets itself), by being
            # replaced (a new Rules, when only policy directories are
            # left) or by growing (a default registered since the last
            # load), never in place otherwise.
            rules, size = self.rules, len(self.rules)
            super().load_rules(force_reload)
            self._next_check = now + RECHECK_SECONDS
            if (force_reload or self.rules is not rules
                    or len(self.rules) != size):
                self._forget()

    def set_rules(self, *args, **kwargs):
        super().set_rules(*args, **kwargs)
        self._forget()

    def clear(self):
        super().clear()
        self._next_check = 0.0
        self._forget()

    def allowed(self, action, target, context):
        """Whether `context` may do the registered `action` on target
        (oslo.policy's authorize, answered False instead of raising).
        """
        return self._allowed(action, target, context, None)

    def check(self, action, target, context):
        """oslo.policy's enforce(action, target, context) of a registered
        action, without do_raise: True or False, and InvalidScope raised
        as enforce raises it; remembered as allowed() is.
        """
        return self._allowed(action, target, context, None, scoped=True)

    def _allowed(self, action, target, context, target_key, scoped=False):
        if action not in self.registered_rules:
            raise policy.PolicyNotRegistered(action)
        self.load_rules()
        if self._memo_ok is None:
            self._memo_ok = all(_pure(c) for c in self.rules.values())
        if not self._memo_ok:
            return self._decide(action, target, context, scoped)
        try:
            key = (action, target_key or _frozen(target),
                   _credentials(context), scoped)
            decision = self._decisions.get(key)
        except TypeError:
            # A value that cannot be a key (a dict): decide every time.
            return self._decide(action, target, context, scoped)
        if decision is None:
            if len(self._decisions) >= _MAX_DECISIONS:
                self._decisions = {}
            decision = self._decisions[key] = self._decide(
                action, target, context, scoped)
        return decision

    def _decide(self, action, target, context, scoped=False):
        try:
            return bool(self.enforce(action, target, context))
        except policy.InvalidScope:
            if scoped:
                # Not remembered: raised again on every check.
                raise
            return False


def get_enforcer():
    """The process-wide enforcer (also the oslo.policy.enforcer entry
    point).
    """
    global _ENFORCER
    enforcer = _ENFORCER
    if enforcer is not None:
        return enforcer
    with _LOCK:
        if _ENFORCER is None:
            enforcer = Enforcer(CONF)
            enforcer.register_defaults(policies.list_rules())
            _ENFORCER = enforcer
    return _ENFORCER


def reset():
    global _ENFORCER
    with _LOCK:
        if _ENFORCER is not None:
            _ENFORCER.clear()
        _ENFORCER = None


def authorize(context, action, target=None):
    """Raise PolicyNotAuthorized unless `context` may do `action` on target.

    The default target is the caller's own project (for creates and lists).
    """
    target_key = None
    if target is None:
        target = {'project_id': context.project_id,
                  'user_id': context.user_id}
        target_key = _OWN
    if not get_enforcer()._allowed(action, target, context, target_key):
        raise exception.PolicyNotAuthorized(action=action)
