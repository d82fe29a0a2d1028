# SPDX-License-Identifier: Apache-2.0
"""cyborg.db.bindings on every backend: the claim uses the handle picker
its caller passes in (the binder passes the drivers'; the DB layer knows
no drivers)."""

from oslo_utils import uuidutils
import pytest

from cyborg.db import arqs
from cyborg.db import bindings
from tests.db import seed


def _bind_started(deployable_row, groups=None):
    dp = seed.profile(groups=groups)
    (arq,) = seed.arq_requests(1, dp=dp)
    (device,) = seed.select(seed.DEVICE,
                            seed.DEVICE.c.id == deployable_row['device_id'])
    arqs.start_bind({arq['uuid']: {
        'hostname': device['hostname'],
        'device_rp_uuid': deployable_row['rp_uuid'],
        'instance_uuid': uuidutils.generate_uuid()}})
    return arq


def test_claim_takes_the_handle_the_picker_chooses(database):
    dep = seed.deployable(driver_name='picky')
    handles = [seed.attach_handle(dep) for _ in range(3)]
    groups = [{'resources:PGPU': '1', 'trait:CUSTOM_LAST': 'required'}]
    arq = _bind_started(dep, groups)
    asked = []

    def picker(driver_name):
        def pick(deployable, request_group, free):
            asked.append((driver_name, deployable['id'], request_group,
                          [h['id'] for h in free]))
            return free[::-1]
        return pick

    claim = bindings.claim_handle(arq['uuid'], picker)
    assert claim['handle']['id'] == handles[-1]['id']
    assert claim['handle']['request_group'] == groups[0]
    assert asked == [('picky', dep['id'], groups[0],
                      [h['id'] for h in handles])]
    in_use = {h['id']: h['in_use'] for h in seed.select(seed.AH)}
    assert in_use == {handles[0]['id']: False, handles[1]['id']: False,
                      handles[2]['id']: True}


def test_claim_fails_when_the_picker_finds_nothing_suitable(database):
    dep = seed.deployable()
    handle = seed.attach_handle(dep)
    arq = _bind_started(dep)

    def picker(driver_name):
        return lambda deployable, request_group, free: []

    with pytest.raises(bindings.BindError) as e:
        bindings.claim_handle(arq['uuid'], picker)
    assert str(e.value).startswith(
        'No free attach handle for this request on deployable %s'
        % dep['name'])
    assert seed.select(seed.AH)[0]['id'] == handle['id']
    assert seed.select(seed.AH)[0]['in_use'] is False
    assert arqs.get(arq['uuid'])['state'] == 'BindStarted'
