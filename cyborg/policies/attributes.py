# SPDX-License-Identifier: Apache-2.0
from cyborg.policies import base

_P = '/v2/attributes'

rules = base.operations('attribute', [
    ('get_all', base.ADMIN_OR_SERVICE, 'List attributes.', [('GET', _P)]),
    ('get_one', base.ADMIN_OR_SERVICE, 'Show an attribute.',
     [('GET', _P + '/{uuid}')]),
    ('create', base.ADMIN, 'Create an attribute.', [('POST', _P)]),
    ('delete', base.ADMIN, 'Delete an attribute.',
     [('DELETE', _P + '/{uuid}')]),
])
