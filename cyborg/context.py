# SPDX-License-Identifier: Apache-2.0
"""Request context: who is calling, in which project, with which roles."""

from oslo_context import context

# Keystone role implications (admin > member > reader, manager > member),
# applied here too so header-driven identities behave like real tokens.
_IMPLIED = {'admin': ('manager', 'member', 'reader'),
            'manager': ('member', 'reader'),
            'member': ('reader',)}

# The environ keys oslo.context makes a context of, besides the request
# ids: keystonemiddleware's (or NoAuth's) identity headers.
_REQUEST_IDS = ('openstack.request_id', 'openstack.global_request_id')
_IDENTITY_KEYS = tuple(sorted(
    {key for keys in context._ENVIRON_HEADERS.values() for key in keys
     if key not in _REQUEST_IDS}
    | {'HTTP_X_ROLES', 'HTTP_X_ROLE', 'HTTP_X_SERVICE_ROLES',
       'HTTP_X_IS_ADMIN_PROJECT'}))
_ABSENT = object()
_ABSENTS = (_ABSENT,) * len(_IDENTITY_KEYS)
# Contexts made from the identity headers, per set of their values: a
# client sends the same ones (the same token) request after request.
_IDENTITIES = {}
_MAX_IDENTITIES = 1000


def _expand(roles):
    out = set(r.strip().lower() for r in roles if r and r.strip())
    for role in list(out):
        out.update(_IMPLIED.get(role, ()))
    return sorted(out)


class RequestContext(context.RequestContext):

    def __init__(self, **kwargs):
        kwargs['roles'] = _expand(kwargs.get('roles') or [])
        kwargs['service_roles'] = _expand(kwargs.get('service_roles') or [])
        super().__init__(**kwargs)
        self.is_admin = 'admin' in self.roles

    @property
    def is_service(self):
        return 'service' in self.roles or 'service' in self.service_roles

    @classmethod
    def from_environ(cls, environ, **kwargs):
        """oslo.context's from_environ, made once per identity.

        The context of a request is the one its identity headers make
        (kept per their values) with the request's own ids, stored as the
        thread's current context as a new one would be.
        """
        if kwargs or cls is not RequestContext:
            return super().from_environ(environ, **kwargs)
        key = tuple(map(environ.get, _IDENTITY_KEYS, _ABSENTS))
        made = _IDENTITIES.get(key)
        if made is None:
            identity = {k: v for k, v in zip(_IDENTITY_KEYS, key)
                        if v is not _ABSENT}
            made = super().from_environ(identity, overwrite=False)
            if len(_IDENTITIES) >= _MAX_IDENTITIES:
                _IDENTITIES.clear()
            _IDENTITIES[key] = made
        ctx = cls.__new__(cls)
        # The identity's attributes as one copy of its dict (an update
        # of an empty one grows it step by step).
        ctx.__dict__ = made.__dict__.copy()
        ctx.roles = list(made.roles)
        ctx.service_roles = list(made.service_roles)
        ctx.request_id = environ.get(
            'openstack.request_id') or context.generate_request_id()
        ctx.global_request_id = environ.get('openstack.global_request_id')
        ctx.update_store()
        return ctx

    def policy_key(self):
        """What oslo.policy decides on (to_policy_values()), as a key."""
        return (self.user_id, self.user_domain_id, self.system_scope,
                self.domain_id, self.project_id, self.project_domain_id,
                tuple(self.roles), self.is_admin_project,
                self.service_user_id, self.service_user_domain_id,
                self.service_project_id, self.service_project_domain_id,
                tuple(self.service_roles))


def get_admin_context():
    return RequestContext(roles=['admin', 'service'], is_admin=True,
                          overwrite=False)
