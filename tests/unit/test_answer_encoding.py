# SPDX-License-Identifier: Apache-2.0
"""Profiles and ARQs in answers (cyborg.api.controllers.device_profiles
and arqs' encode()): the text json.dumps() gives of Cyborg's fields, byte
for byte, whatever the values hold; a profile's groups' text kept per
stored text, within bounds.
"""

import datetime
import json
from unittest import mock

import hypothesis
from hypothesis import strategies as st

from cyborg.api.controllers import arqs
from cyborg.api.controllers import base
from cyborg.api.controllers import device_profiles

URL = 'http://cyborg.example:6666'
_times = st.one_of(st.none(), st.datetimes(
    min_value=datetime.datetime(1970, 1, 1),
    max_value=datetime.datetime(9999, 12, 31)))
_groups = st.lists(st.dictionaries(st.text(), st.text(), max_size=4),
                   max_size=3)


def _spec(dp, groups, url):
    """What the answer's profile is, as the API documents it."""
    return {'uuid': dp['uuid'], 'name': dp['name'],
            'description': dp['description'], 'groups': groups,
            'links': [{'href': '%s/v2/device_profiles/%s'
                       % (url, dp['uuid']), 'rel': 'self'}],
            'created_at': base.isotime(dp['created_at']),
            'updated_at': base.isotime(dp['updated_at'])}


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(uuid=st.text(), name=st.text(),
                  description=st.one_of(st.none(), st.text()),
                  created_at=_times, updated_at=_times, groups=_groups)
def test_a_profile_is_what_json_dumps_gives(uuid, name, description,
                                            created_at, updated_at, groups):
    # Any text: quotes, backslashes, control characters, non-ASCII,
    # unpaired surrogates (json.dumps escapes them all as \\uXXXX).
    dp = {'uuid': uuid, 'name': name, 'description': description,
          'created_at': created_at, 'updated_at': updated_at,
          'profile_json': json.dumps({'groups': groups})}
    got = device_profiles.encode(dp, device_profiles._groups_json(dp), URL)
    assert got == json.dumps(_spec(dp, groups, URL))
    assert json.loads(got)['groups'] == groups


_maybe_text = st.one_of(st.none(), st.text())
_arqs = st.fixed_dictionaries({
    'uuid': st.text(), 'state': st.sampled_from(
        ('Initial', 'BindStarted', 'Bound', 'BindFailed', 'Deleting')),
    'device_profile_name': st.text(),
    'device_profile_group_id': st.integers(0, 2 ** 31 - 1),
    'hostname': _maybe_text, 'device_rp_uuid': _maybe_text,
    'instance_uuid': _maybe_text, 'project_id': _maybe_text,
    'attach_handle_type': st.text(), 'attach_handle_uuid': _maybe_text,
    'attach_handle_info': st.dictionaries(st.text(), st.text(),
                                          max_size=4),
    'bind_failure': _maybe_text, 'created_at': _times,
    'updated_at': _times})


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(arq=_arqs, version=st.sampled_from(((2, 0), (2, 4),
                                                      (2, 5), (2, 6))))
def test_an_arq_is_what_json_dumps_gives(arq, version):
    spec = {k: arq[k] for k in (
        'uuid', 'state', 'device_profile_name', 'device_profile_group_id',
        'hostname', 'device_rp_uuid', 'instance_uuid', 'project_id',
        'attach_handle_type', 'attach_handle_uuid', 'attach_handle_info')}
    if version >= (2, 5):
        spec['state_reason'] = arq['bind_failure']
    spec.update(
        links=[{'href': '%s/v2/accelerator_requests/%s' % (URL, arq['uuid']),
                'rel': 'self'}],
        created_at=base.isotime(arq['created_at']),
        updated_at=base.isotime(arq['updated_at']))
    with mock.patch.object(base, 'version', return_value=version):
        assert arqs.encode(arq, URL) == json.dumps(spec)


def test_a_profile_read_with_its_stored_text_in_another_form():
    # Stored by another writer: other spacing, a key besides the groups.
    groups = [{'resources:VGPU': '1', 'trait:CUSTOM_É': 'required'}]
    stored = '{ "other": 1,"groups" :%s }' % json.dumps(groups, indent=2)
    dp = {'profile_json': stored}
    assert device_profiles._groups_json(dp) == json.dumps(groups)


def test_the_groups_texts_kept_stay_within_bounds(monkeypatch):
    kept = base.EncodedCache(size=3)
    monkeypatch.setattr(device_profiles, '_GROUPS_JSON', kept)
    for n in range(10):
        dp = {'profile_json': json.dumps({'groups': [{'n': str(n)}]})}
        assert device_profiles._groups_json(dp) == '[{"n": "%d"}]' % n
        assert 1 <= len(kept._items) <= 3
    # A stored text longer than what is kept is encoded, not kept.
    long = {'profile_json': json.dumps({'groups': [{'d': 'x' * 5000}]})}
    assert json.loads(device_profiles._groups_json(long)) == [
        {'d': 'x' * 5000}]
    assert long['profile_json'] not in kept._items


def test_json_value_is_json_dumps():
    for value in ('', 'a"b\\c\n\x00\u00e9\ud800\U0001f600', None, 3, -7,
                  10 ** 30, 2.5, True, False, ['x'], {}, {'a': [1]}):
        assert base.json_value(value) == json.dumps(value)
