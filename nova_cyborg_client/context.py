# SPDX-License-Identifier: Apache-2.0
"""Who calls: the user's token, project and user, as Nova's RequestContext.

Nova calls Cyborg with the request user's token, and finds Cyborg in the
service catalog that came with it. Without Keystone (cyborg-aio, tests)
the token is `admin`, which noauth2 services take for an admin user, and
endpoints come from `endpoint_override` in [cyborg] / [placement].

With `service_auth` (a keystoneauth plugin of Nova's service user, as
Nova's [service_user] with send_service_user_token) every request also
carries Nova's own token as X-Service-Token, as Nova sends it.
"""

from keystoneauth1 import plugin
from keystoneauth1 import service_token

NOAUTH_TOKEN = 'admin'


class _ContextAuthPlugin(plugin.BaseAuthPlugin):
    """Sends the context's token; finds endpoints in its catalog."""

    def __init__(self, auth_token, service_catalog):
        super().__init__()
        self.auth_token = auth_token
        self.service_catalog = service_catalog or []

    def get_token(self, session, **kwargs):
        return self.auth_token

    def get_endpoint(self, session, service_type=None, interface=None,
                     region_name=None, **kwargs):
        interfaces = interface if isinstance(interface, (list, tuple)) \
            else [interface]
        for entry in self.service_catalog:
            if entry.get('type') != service_type:
                continue
            for wanted in interfaces:
                for endpoint in entry.get('endpoints', []):
                    if wanted not in (None, endpoint.get('interface')):
                        continue
                    if region_name and endpoint.get('region') != region_name:
                        continue
                    return endpoint.get('url')
        return None


class RequestContext:

    def __init__(self, auth_token=NOAUTH_TOKEN, project_id='demo-project',
                 user_id='demo-user', service_catalog=None,
                 service_auth=None):
        self.auth_token = auth_token
        self.project_id = project_id
        self.user_id = user_id
        self.service_catalog = service_catalog
        self.service_auth = service_auth

    def get_auth_plugin(self):
        user_auth = _ContextAuthPlugin(self.auth_token, self.service_catalog)
        if self.service_auth is None:
            return user_auth
        return service_token.ServiceTokenAuthWrapper(
            user_auth=user_auth, service_auth=self.service_auth)
