# SPDX-License-Identifier: Apache-2.0
"""Request groups and the GET /allocation_candidates query, as Nova's
scheduler builds them (RequestGroup, ResourceRequest, fill_provider_mapping).

A device profile group becomes a request group whose requester_id
(`device_profile_<index>`) is also its granular suffix in the query; the
flavor's VCPU/MEMORY_MB/DISK_GB form the unsuffixed group.
"""

import math
import re
from urllib import parse

import os_resource_classes as orc
from oslo_log import log

from nova_cyborg_client import conf as nova_conf
from nova_cyborg_client import exception

LOG = log.getLogger(__name__)

# Placement microversion of the candidates query and the claim: 1.35 adds
# root_required, 1.34 the allocation requests' `mappings`.
PLACEMENT_MICROVERSION = '1.36'
COMPUTE_ACCELERATORS = 'COMPUTE_ACCELERATORS'
DEVICE_PROFILE_SPEC = 'accel:device_profile'
XS_KEYPAT = re.compile(r'^(resources|trait)([a-zA-Z0-9_-]{1,64})?:(.*)$')


class Flavor:
    def __init__(self, name='accel.small', vcpus=1, memory_mb=512,
                 root_gb=1, ephemeral_gb=0, swap=0, extra_specs=None):
        self.name = name
        self.vcpus = vcpus
        self.memory_mb = memory_mb
        self.root_gb = root_gb
        self.ephemeral_gb = ephemeral_gb
        self.swap = swap
        self.extra_specs = dict(extra_specs or {})


class RequestGroup:
    """One group of resources and traits served by a single provider."""

    def __init__(self, requester_id=None, use_same_provider=True):
        self.requester_id = requester_id
        self.use_same_provider = use_same_provider
        self.resources = {}
        self.required_traits = set()
        self.forbidden_traits = set()
        self.provider_uuids = []

    def add_resource(self, rclass, amount):
        if not (rclass.startswith(orc.CUSTOM_NAMESPACE)
                or rclass in orc.STANDARDS):
            LOG.warning("Received an invalid ResourceClass '%s' in extra "
                        "specs.", rclass)
            return
        try:
            amount = int(amount)
            if amount < 0:
                raise ValueError()
        except (TypeError, ValueError):
            LOG.warning("Resource amounts must be nonnegative integers. "
                        "Received '%s' for key resources%s.", amount,
                        self.requester_id or '')
            return
        self.resources[rclass] = amount

    def add_trait(self, trait_name, trait_type):
        if trait_type == 'required':
            self.required_traits.add(trait_name)
        elif trait_type == 'forbidden':
            self.forbidden_traits.add(trait_name)
        else:
            LOG.warning("Only (required|forbidden) traits are supported. "
                        "Received '%s'.", trait_type)

    def is_empty(self):
        return not (self.resources or self.required_traits
                    or self.forbidden_traits)

    def strip_zeros(self):
        self.resources = {rc: n for rc, n in self.resources.items() if n}

    def to_queryparams(self):
        suffix = self.requester_id or ''
        params = []
        if self.resources:
            params.append(('resources' + suffix, ','.join(sorted(
                '%s:%s' % (rc, n) for rc, n in self.resources.items()))))
        required = (sorted(self.required_traits)
                    + ['!' + t for t in sorted(self.forbidden_traits)])
        if required:
            params.append(('required' + suffix, ','.join(required)))
        return params

    def __repr__(self):
        return ('RequestGroup(requester_id=%r, resources=%r, required=%r, '
                'forbidden=%r, provider_uuids=%r)'
                % (self.requester_id, self.resources,
                   sorted(self.required_traits),
                   sorted(self.forbidden_traits), self.provider_uuids))


def parse_extra_spec(group, key, value):
    """Add `key: value` to `group` if it is a resources/trait spec; the
    key's suffix, if any, is the caller's business.
    """
    match = XS_KEYPAT.match(key)
    if not match:
        return False
    prefix, _suffix, name = match.groups()
    if prefix == 'resources':
        group.add_resource(rclass=name, amount=value)
    else:
        group.add_trait(trait_name=name, trait_type=value)
    return True


class ResourceRequest:
    """The whole candidates query: the unsuffixed group, suffixed groups,
    group_policy, root_required and limit.
    """

    def __init__(self, limit=None):
        self._groups = {}  # requester_id ('' for unsuffixed) -> RequestGroup
        self.group_policy = None
        self.suffixed_groups_from_flavor = 0
        self.root_required = set()
        self.root_forbidden = set()
        self.limit = limit

    @classmethod
    def from_flavor(cls, flavor, requested_resources=(), conf=None):
        """What Nova's scheduler asks Placement for a boot of `flavor`:
        the flavor's own resources and extra specs, then the groups others
        requested (device profiles), then the accelerators pre-filter.
        """
        conf = conf or nova_conf.CONF
        req = cls(limit=conf.scheduler.max_placement_results)
        unsuffixed = req.get_request_group(None)
        unsuffixed.resources.update({
            'VCPU': flavor.vcpus,
            'MEMORY_MB': flavor.memory_mb,
            'DISK_GB': (flavor.root_gb + flavor.ephemeral_gb
                        + int(math.ceil(flavor.swap / 1024.0))),
        })
        req._process_extra_specs(flavor.extra_specs)
        for group in requested_resources:
            req.add_request_group(group)
        if flavor.extra_specs.get(DEVICE_PROFILE_SPEC):
            req.root_required.add(COMPUTE_ACCELERATORS)
        req.strip_zeros()
        if req.get_num_of_suffixed_groups() >= 2 and not req.group_policy:
            LOG.warning('There is more than one numbered request group in the '
                        'allocation candidate query but the flavor did not '
                        'specify any group policy.')
            if req.suffixed_groups_from_flavor <= 1:
                LOG.info('At least one numbered request group is defined '
                         'outside of the flavor but the flavor did not '
                         'specify any group policy. To avoid the placement '
                         "failure the group policy defaults to 'none'.")
                req.group_policy = 'none'
        return req

    def _process_extra_specs(self, extra_specs):
        for key, value in extra_specs.items():
            if key == 'group_policy':
                self.group_policy = value
                continue
            match = XS_KEYPAT.match(key)
            if not match:
                continue
            suffix = match.group(2)
            group = self.get_request_group(suffix)
            if suffix and group.is_empty():
                self.suffixed_groups_from_flavor += 1
            parse_extra_spec(group, key, value)

    def get_request_group(self, ident):
        """The group with this suffix (None/'' → unsuffixed), created
        empty if new.
        """
        ident = ident or ''
        if ident not in self._groups:
            self._groups[ident] = RequestGroup(
                requester_id=ident or None, use_same_provider=bool(ident))
        return self._groups[ident]

    def add_request_group(self, group):
        if not group.requester_id:
            raise ValueError('Missing requester_id in RequestGroup! This is '
                             'probably a programmer error. %s' % group)
        if group.is_empty():
            raise ValueError('Refusing to add no-op RequestGroup with '
                             'requester_id=%s. This is probably a '
                             'programmer error.' % group.requester_id)
        if group.requester_id in self._groups:
            raise exception.RequestGroupSuffixConflict(
                suffix=group.requester_id)
        self._groups[group.requester_id] = group

    @property
    def groups(self):
        return list(self._groups.values())

    def get_num_of_suffixed_groups(self):
        return len([ident for ident in self._groups if ident])

    def strip_zeros(self):
        for ident, group in list(self._groups.items()):
            group.strip_zeros()
            if ident and group.is_empty():
                del self._groups[ident]

    def to_queryparams(self):
        params = []
        if self.limit is not None:
            params.append(('limit', self.limit))
        if self.group_policy is not None:
            params.append(('group_policy', self.group_policy))
        root = (sorted(self.root_required)
                + ['!' + t for t in sorted(self.root_forbidden)])
        if root:
            params.append(('root_required', ','.join(root)))
        for group in self._groups.values():
            params.extend(group.to_queryparams())
        return sorted(params, key=lambda p: (p[0], str(p[1])))

    def to_querystring(self):
        return parse.urlencode(self.to_queryparams())


def fill_provider_mapping(requested_resources, allocation_request):
    """Set each group's provider_uuids from the chosen allocation request's
    `mappings` (requester_id → [provider uuid]).
    """
    mappings = allocation_request['mappings']
    for group in requested_resources:
        group.provider_uuids = mappings[group.requester_id]


def get_request_group_mapping(requested_resources):
    """{requester_id: [provider uuid]}: Nova's rg_rp_map."""
    return {g.requester_id: g.provider_uuids for g in requested_resources}
