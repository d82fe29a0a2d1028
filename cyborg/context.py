# SPDX-License-Identifier: Apache-2.0
"""Request context: who is calling, in which project, with which roles."""

from oslo_context import context

# Keystone role implications (admin > member > reader, manager > member),
# applied here too so header-driven identities behave like real tokens.
_IMPLIED = {'admin': ('manager', 'member', 'reader'),
            'manager': ('member', 'reader'),
            'member': ('reader',)}


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


def get_admin_context():
    return RequestContext(roles=['admin', 'service'], is_admin=True,
                          overwrite=False)
