# SPDX-License-Identifier: Apache-2.0
from cyborg.policies import base

_P = '/v2/devices'

# Hardware inventory is operator information: not for ordinary projects.
rules = base.operations('device', [
    ('get_all', base.ADMIN_OR_SERVICE, 'List devices.', [('GET', _P)]),
    ('get_one', base.ADMIN_OR_SERVICE, 'Show a device.',
     [('GET', _P + '/{uuid}')]),
    ('disable', base.ADMIN, 'Put a device into maintenance.',
     [('POST', _P + '/{uuid}/disable')]),
    ('enable', base.ADMIN, 'Take a device out of maintenance.',
     [('POST', _P + '/{uuid}/enable')]),
    ('exclude', base.ADMIN, 'Exclude a device from management (fenced, '
     'never handed out) (microversion 2.4).',
     [('POST', _P + '/{uuid}/exclude')]),
    ('include', base.ADMIN, 'Return an excluded device to management '
     '(microversion 2.4).', [('POST', _P + '/{uuid}/include')]),
    ('reclaim', base.ADMIN, 'Reset and rediscover an Orphaned device '
     '(microversion 2.4).', [('POST', _P + '/{uuid}/reclaim')]),
    ('reset', base.ADMIN, 'Reset a Failed or Lost device that nothing '
     'uses, and rediscover it (microversion 2.6).',
     [('POST', _P + '/{uuid}/reset')]),
    ('share', base.ADMIN, 'Share a GPU by capacity (mode mps or time-slice, '
     'slots) or stop sharing it (mode none) (microversion 2.4).',
     [('POST', _P + '/{uuid}/share')]),
])
