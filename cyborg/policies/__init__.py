# SPDX-License-Identifier: Apache-2.0
"""Policy defaults, one module per resource."""

import itertools

from cyborg.policies import arqs
from cyborg.policies import attributes
from cyborg.policies import base
from cyborg.policies import deployables
from cyborg.policies import device_profiles
from cyborg.policies import devices


def list_rules():
    return list(itertools.chain(
        base.rules, device_profiles.rules, arqs.rules, devices.rules,
        deployables.rules, attributes.rules))
