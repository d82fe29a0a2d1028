# SPDX-License-Identifier: Apache-2.0
"""keystoneauth Adapters for the services we call ([placement], [nova]).

Each conf group carries keystoneauth's session, auth and adapter options.
With `auth_type = none` (the embedded mode, and any service deployed with
`auth_strategy = noauth2`) the plugin sends `X-Auth-Token: admin`, which
Placement's and Nova's noauth2 middleware turn into an admin request
(keystoneauth's own `none` plugin sends the token `notused`, which they would
treat as an unprivileged user). Set `endpoint_override` in that case: there is
no catalog to find the service in.
"""

from keystoneauth1 import loading as ks_loading
from keystoneauth1 import noauth

from cyborg.conf import CONF

NOAUTH2_TOKEN = 'admin'


class NoAuth2(noauth.NoAuth):
    """No Keystone; the token says who we are to a noauth2 service
    (`user[:project]`, `admin` being the admin user).
    """

    def __init__(self, endpoint=None, token=NOAUTH2_TOKEN):
        super().__init__(endpoint=endpoint)
        self.token = token

    def get_token(self, session):
        return self.token


def get_auth(group, conf=CONF):
    auth = ks_loading.load_auth_from_conf_options(conf, group)
    if isinstance(auth, noauth.NoAuth) and not isinstance(auth, NoAuth2):
        auth = NoAuth2(endpoint=auth.endpoint)
    return auth


def get_adapter(group, conf=CONF, **kwargs):
    """An Adapter built from [group]'s options.

    kwargs go to the Adapter (e.g. default_microversion='1.36',
    raise_exc=False).
    """
    auth = get_auth(group, conf)
    session = ks_loading.load_session_from_conf_options(conf, group,
                                                        auth=auth)
    return ks_loading.load_adapter_from_conf_options(
        conf, group, session=session, auth=auth, **kwargs)
