# SPDX-License-Identifier: Apache-2.0
"""Accelerator request bodies."""

from cyborg.api.schemas import common

# Other keys are ignored, as in Cyborg (the CLI sends
# device_profile_group_id and image_uuid).
CREATE = {
    'type': 'object',
    'properties': {'device_profile_name': {'type': ['string', 'null']}},
}

_OP = {
    'type': 'object',
    'properties': {'op': {'type': 'string'}, 'path': {'type': 'string'},
                   'value': {}},
    'required': ['op', 'path'],
}

PATCH = {
    'type': 'object',
    'minProperties': 1,
    'additionalProperties': {'type': 'array', 'items': _OP, 'minItems': 1},
}

# Values of an `add` bind patch, checked once the paths are known good.
BIND_VALUES = {
    'type': 'object',
    'properties': {
        'hostname': common.NAME,
        'device_rp_uuid': common.UUID,
        'instance_uuid': common.UUID,
        'project_id': common.NAME,
    },
}
