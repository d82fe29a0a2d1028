# SPDX-License-Identifier: Apache-2.0
from cyborg.policies import base

_P = '/v2/accelerator_requests'

rules = base.operations('arq', [
    ('get_all', base.ADMIN_OR_READER_OR_SERVICE,
     'List accelerator requests; non-admins see their project only.',
     [('GET', _P)]),
    ('get_one', base.ADMIN_OR_READER_OR_SERVICE,
     'Show an accelerator request.', [('GET', _P + '/{uuid}')]),
    ('create', base.ADMIN_OR_MEMBER_OR_SERVICE,
     'Create accelerator requests from a device profile.', [('POST', _P)]),
    ('update', base.SERVICE,
     'Bind or unbind accelerator requests (Nova, with its service token).',
     [('PATCH', _P), ('PATCH', _P + '/{uuid}')]),
    ('update_project_id', base.ADMIN,
     'Set /project_id in a bind patch (microversion 2.1).',
     [('PATCH', _P)]),
    ('delete', base.ADMIN_OR_MEMBER_OR_SERVICE,
     'Delete unbound accelerator requests.',
     [('DELETE', _P + '?arqs='), ('DELETE', _P + '/{uuid}')]),
    ('delete_bound', base.SERVICE,
     'Delete accelerator requests bound to an instance, or all of an '
     'instance\'s requests (?instance=); Nova does this with its service '
     'token.', [('DELETE', _P + '?instance=')]),
])
