# SPDX-License-Identifier: Apache-2.0
from cyborg.policies import base

_P = '/v2/device_profiles'

# Device profiles are global (no project); any authenticated reader may see
# them because Nova reads them with the booting user's token.
rules = base.operations('device_profile', [
    ('get_all', base.ADMIN + ' or role:reader or ' + base.SERVICE,
     'List device profiles.', [('GET', _P)]),
    ('get_one', base.ADMIN + ' or role:reader or ' + base.SERVICE,
     'Show a device profile.', [('GET', _P + '/{uuid_or_name}')]),
    ('create', base.ADMIN, 'Create a device profile.', [('POST', _P)]),
    ('delete', base.ADMIN, 'Delete device profiles.',
     [('DELETE', _P + '/{uuid_or_names}'), ('DELETE', _P + '?value=')]),
])
