# SPDX-License-Identifier: Apache-2.0
"""`/` and `/v2`: version documents (no auth), and routing to resources."""

import pecan

from cyborg.api.controllers import arqs
from cyborg.api.controllers import attributes
from cyborg.api.controllers import base
from cyborg.api.controllers import deployables
from cyborg.api.controllers import device_profiles
from cyborg.api.controllers import devices
from cyborg.api import microversion

DESCRIPTION = ('Cyborg is the OpenStack project for lifecycle management of '
               'hardware accelerators, such as GPUs,FPGAs, AI chips, security '
               'accelerators, etc.')


def _version(id_, href):
    return {'id': id_, 'status': 'CURRENT',
            'max_version': microversion.fmt(microversion.MAX_VERSION),
            'min_version': microversion.fmt(microversion.MIN_VERSION),
            'links': [{'href': href, 'rel': 'self'}]}


class V2Controller:
    device_profiles = device_profiles.DeviceProfilesController()
    accelerator_requests = arqs.ARQsController()
    devices = devices.DevicesController()
    deployables = deployables.DeployablesController()
    attributes = attributes.AttributesController()

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET')

    @index.when(method='GET')
    @base.handler()
    def get(self):
        return _version('v2.0', base.base_url() + '/v2/')


class RootController:
    v2 = V2Controller()

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET')

    @index.when(method='GET')
    @base.handler()
    def get(self):
        v2 = _version('v2', base.base_url() + '/v2')
        return {'name': 'OpenStack Cyborg API', 'description': DESCRIPTION,
                'versions': [v2], 'default_version': v2}

    @pecan.expose()
    def _lookup(self, *remainder):
        # /device_profiles is /v2/device_profiles, as in Cyborg.
        return self.v2, remainder
