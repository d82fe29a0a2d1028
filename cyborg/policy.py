"""The policy enforcer and the one call handlers use to authorize."""

import threading

from oslo_policy import policy

from cyborg.common import exception
from cyborg.conf import CONF
from cyborg import policies

_ENFORCER = None
_LOCK = threading.Lock()


def get_enforcer():
    """The process-wide enforcer (also the oslo.policy.enforcer entry
    point)."""
    global _ENFORCER
    with _LOCK:
        if _ENFORCER is None:
            _ENFORCER = policy.Enforcer(CONF)
            _ENFORCER.register_defaults(policies.list_rules())
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
    if target is None:
        target = {'project_id': context.project_id,
                  'user_id': context.user_id}
    try:
        get_enforcer().authorize(action, target, context, do_raise=True,
                                 exc=exception.PolicyNotAuthorized,
                                 action=action)
    except policy.InvalidScope:
        raise exception.PolicyNotAuthorized(action=action)
