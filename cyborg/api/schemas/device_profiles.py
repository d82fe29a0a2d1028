# SPDX-License-Identifier: Apache-2.0
"""Device profile request bodies."""

from cyborg.api.schemas import common

# Group values may be sent as numbers; they are stored as strings.
_GROUP = {'type': 'object',
          'additionalProperties': {'type': ['string', 'integer']}}

PROFILE = {
    'type': 'object',
    'properties': {
        'name': common.NAME,
        'groups': {'type': 'array', 'items': _GROUP},
        'description': {'type': ['string', 'null'], 'maxLength': 65535},
        'uuid': common.UUID,
    },
    'additionalProperties': False,
}

CREATE = {'type': 'array'}
