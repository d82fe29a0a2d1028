# SPDX-License-Identifier: Apache-2.0
"""/v2/device_profiles: named, global lists of request groups."""

import json
import re

import pecan

from cyborg.api.controllers import base
from cyborg.api import profile_compat
from cyborg.api.schemas import device_profiles as schema
from cyborg.common import exception
from cyborg.common import identifiers
from cyborg.db import device_profiles as db

NAME_RE = re.compile(r'^[a-zA-Z0-9-_]+$')
KEY_RE = re.compile(r'^(resources:|trait:|accel:)')
TRAIT_VALUES = ['required', 'forbidden']
# Resource classes Placement (or Nova) knows, besides CUSTOM_*.
STANDARD_RCS = ('FPGA', 'PGPU', 'VGPU')
# Placement's longest trait or resource class name.
MAX_NAME = 255
# Placement stores amounts in 32-bit integer columns.
MAX_AMOUNT = 2 ** 31 - 1


# A profile in an answer: the JSON text json.dumps() would give of
# {'uuid', 'name', 'description', 'groups', 'links': [{'href', 'rel':
# 'self'}], 'created_at', 'updated_at'}, in that order (Cyborg's fields),
# made with one format and each string quoted by json's C function: a
# fifth of json.dumps' cost of the same dict, on every read of a profile.
_PROFILE = ('{"uuid": %s, "name": %s, "description": %s, "groups": %s, '
            '"links": [{"href": %s, "rel": "self"}], "created_at": %s, '
            '"updated_at": %s}')


def encode(dp, groups_json, url=None):
    """The JSON text of profile `dp` (a dict of its columns) in an answer,
    `groups_json` the JSON text of its groups.
    """
    uuid = dp['uuid']
    value = base.json_value
    return _PROFILE % (
        value(uuid), value(dp['name']), value(dp['description']),
        groups_json, value(base.self_href('device_profiles', uuid, url)),
        value(base.isotime(dp['created_at'])),
        value(base.isotime(dp['updated_at'])))


# The JSON text of a profile's groups per stored profile_json text: the
# profiles of a cloud share a handful of group lists, and decoding the
# stored JSON to encode it again was half of encoding a profile. Texts
# longer than _GROUPS_JSON_TEXT are not kept.
_GROUPS_JSON = base.EncodedCache(1024)
_GROUPS_JSON_TEXT = 4096


def _groups_json(dp):
    """The JSON text of the groups of a profile read with its stored
    text (`profile_json`).
    """
    stored = dp['profile_json']

    def encode():
        return json.dumps(db.groups_of(dp))
    if len(stored) > _GROUPS_JSON_TEXT:
        return encode()
    return _GROUPS_JSON.get(stored, encode)


# A profile never changes once created: its JSON in a list is kept per
# (stored columns, base URL), and so is a whole list.
_LISTED = base.CollectionCache('device_profiles', base.EncodedCache())


def _normalize_group(group):
    """Validate one request group; return it with canonical keys/values."""
    out = {}
    for key, value in group.items():
        if not KEY_RE.match(key):
            raise exception.Invalid(
                'Device profile group keys must be of the form '
                '^(resources:|trait:|accel:)')
        value = str(value)
        prefix, _, name = key.partition(':')
        name = name.replace(' ', '')
        if prefix in ('trait', 'resources') and len(name) > MAX_NAME:
            # Placement's limit for traits and resource classes.
            raise exception.Invalid(
                'Group key %s: a %s name is at most %d characters'
                % (exception.excerpt(key), 'trait' if prefix == 'trait'
                   else 'resource class', MAX_NAME))
        if prefix == 'trait':
            if not name.startswith('CUSTOM_'):
                raise exception.Invalid(
                    'Unsupported trait name format %s, should start with '
                    'CUSTOM_' % exception.excerpt(name))
            if value not in TRAIT_VALUES:
                raise exception.Invalid(
                    'Unsupported trait value %s, the value must be one among '
                    '%s' % (exception.excerpt(value), TRAIT_VALUES))
            key = 'trait:' + name
        elif prefix == 'resources':
            if name not in STANDARD_RCS and not name.startswith('CUSTOM_'):
                raise exception.Invalid('Unsupported resource class %s'
                                        % exception.excerpt(name))
            try:
                amount = int(value)
            except ValueError:
                amount = 0
            if not 1 <= amount <= MAX_AMOUNT:
                raise exception.Invalid('Resources number %s is invalid'
                                        % exception.excerpt(value))
            key, value = 'resources:' + name, str(amount)
        out[key] = value
    return out


def validate(profile):
    """Cyborg's checks in Cyborg's order, all answered with 400."""
    if not isinstance(profile, dict) or not profile.get('name'):
        raise exception.Invalid('DeviceProfile name needed.')
    if not isinstance(profile['name'], str) or not NAME_RE.match(
            profile['name']):
        raise exception.Invalid(
            'Device profile name must be of the form ^[a-zA-Z0-9-_]+$')
    if not profile.get('groups'):
        raise exception.Invalid('DeviceProfile needs groups field.')
    base.validate(profile, schema.PROFILE)
    return [_normalize_group(g) for g in profile['groups']]


class DeviceProfileController:
    def __init__(self, ident):
        self.ident = ident

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET, DELETE')

    @index.when(method='GET')
    @base.handler()
    def get(self):
        base.authorize('cyborg:device_profile:get_one')
        base.query()
        # By name at any microversion (Cyborg: from 2.2 on), so that
        # clients that send no version can show a profile by name. Anything
        # shaped like a uuid is looked up as one, at every version.
        if base.is_uuid_like(self.ident):
            dp = db.get_by_uuid(self.ident, stored=True)
        else:
            dp = db.get_by_name(self.ident, stored=True)
        return base.Encoded('{"device_profile": %s}'
                            % encode(dp, _groups_json(dp)))

    @index.when(method='DELETE')
    @base.handler(204)
    def delete(self):
        base.authorize('cyborg:device_profile:delete')
        base.query()
        _delete(self.ident)


def _delete(value):
    if base.is_uuid_like(value):
        db.delete_by_uuid(value)
    else:
        names = [n for n in value.split(',') if n]
        if not names:
            raise exception.Invalid('Missing device profile name or uuid.')
        db.delete_by_names(names)


class DeviceProfilesController:

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET, POST, DELETE')

    @index.when(method='GET')
    @base.handler()
    def get_all(self):
        base.authorize('cyborg:device_profile:get_all')
        params = base.query('name', 'limit', 'marker')
        names = params.get('name')
        names = [n for n in names.split(',') if n] if names is not None \
            else None
        rows, decode = db.list_stored(names=names,
                                      **base.pagination(params))
        url = base.base_url()

        def encode_row(row):
            dp = decode(row)
            return encode(dp, _groups_json(dp), url)
        return _LISTED.answer(rows, url, encode_row)

    @index.when(method='POST')
    @base.handler(201)
    def post(self):
        base.authorize('cyborg:device_profile:create')
        base.query()
        body = base.body(schema.CREATE)
        if len(body) != 1:
            raise exception.Invalid('Only one device profile allowed per '
                                    'POST request for now.')
        profile = body[0]
        groups = profile_compat.translate_groups(validate(profile))
        groups_json = json.dumps(groups)
        dp = db.create(uuid=profile.get('uuid') or identifiers.new_uuid(),
                       name=profile['name'], groups=groups,
                       description=profile.get('description'),
                       groups_json=groups_json)
        return base.Encoded(encode(dp, groups_json))

    @index.when(method='DELETE')
    @base.handler(204)
    def delete(self):
        base.authorize('cyborg:device_profile:delete')
        params = base.query('value')
        _delete(params.get('value', ''))

    @pecan.expose()
    def _lookup(self, ident, *remainder):
        return DeviceProfileController(ident), remainder
