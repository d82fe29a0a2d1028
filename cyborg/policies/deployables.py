# SPDX-License-Identifier: Apache-2.0
from cyborg.policies import base

_P = '/v2/deployables'

rules = base.operations('deployable', [
    ('get_all', base.ADMIN_OR_SERVICE, 'List deployables.', [('GET', _P)]),
    ('get_one', base.ADMIN_OR_SERVICE, 'Show a deployable.',
     [('GET', _P + '/{uuid}')]),
    ('program', base.ADMIN, 'Program a deployable (FPGA).',
     [('PATCH', _P + '/{uuid}/program')]),
])
