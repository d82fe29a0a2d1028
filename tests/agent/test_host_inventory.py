# SPDX-License-Identifier: Apache-2.0
"""The conductor's diff of an agent report against the DB, on every
backend: additions, changes and removals, and no writes when nothing
changed."""

import copy

import sqlalchemy as sa

from cyborg.agent import manager
from cyborg.db import api as db_api
from cyborg.db import host_inventory
from cyborg.db import models
from cyborg.drivers import fake

HOST = 'compute-1'


def _report():
    devices = fake.FakeDriver(fake.default_host_spec()).discover()
    return manager.annotate(devices, HOST)


def _counts():
    with db_api.reader() as session:
        return {t.name: session.execute(
            sa.select(sa.func.count()).select_from(t)).scalar()
            for t in (models.Device.__table__, models.Deployable.__table__,
                      models.Attribute.__table__,
                      models.ControlpathID.__table__,
                      models.AttachHandle.__table__)}


def test_first_report_adds_everything_then_nothing_changes(database):
    devices = _report()
    writes, statuses = host_inventory.apply_report(HOST, devices)
    assert writes > 0
    assert {s['status'] for s in statuses.values()} == {'enabled'}
    counts = _counts()
    assert counts['devices'] == 3
    assert counts['controlpath_ids'] == 3
    assert counts['deployables'] == 3
    assert counts['attach_handles'] == 6      # 1 + 1 + 4 FPGA functions
    writes, _ = host_inventory.apply_report(HOST, _report())
    assert writes == 0
    assert _counts() == counts


def test_deployables_carry_provider_uuid_and_attributes(database):
    devices = _report()
    host_inventory.apply_report(HOST, devices)
    current = host_inventory.host_devices(HOST)
    dep = next(iter(current.values()))['deployables']
    [(name, slot)] = dep.items()
    reported = next(d for dv in devices for d in dv.deployables
                    if d.name == name)
    assert slot['row']['rp_uuid'] == reported.rp_uuid
    assert slot['attributes']['rc']['value'] == reported.resource_class
    assert 'OWNER_CYBORG' in {a['value'] for a in slot['attributes'].values()}


def test_changes_are_applied_in_place(database):
    host_inventory.apply_report(HOST, _report())
    before = host_inventory.host_devices(HOST)
    devices = _report()
    devices[0].model = 'NVIDIA H200 NVL'
    dep = devices[2].deployables[0]              # the FPGA
    dep.num_accelerators = 2
    dep.attach_handles = dep.attach_handles[:2]
    dep.attributes['trait9'] = 'CUSTOM_NEW'
    writes, _ = host_inventory.apply_report(HOST, devices)
    assert writes == 4   # device model, deployable, handle delete, attr add
    after = host_inventory.host_devices(HOST)
    assert {k: v['device']['uuid'] for k, v in after.items()} == \
        {k: v['device']['uuid'] for k, v in before.items()}
    fpga = after[next(k for k in after if '"0c"' in k)]
    slot = fpga['deployables']['0000:0c:00.0']
    assert slot['row']['num_accelerators'] == 2
    assert len(slot['handles']) == 2
    assert slot['attributes']['trait9']['value'] == 'CUSTOM_NEW'


def test_vanished_device_is_removed(database):
    host_inventory.apply_report(HOST, _report())
    writes, statuses = host_inventory.apply_report(HOST, _report()[:2])
    assert writes > 0
    assert len(statuses) == 2
    assert _counts()['devices'] == 2
    assert _counts()['attach_handles'] == 2


def test_vanished_device_in_use_is_kept(database):
    host_inventory.apply_report(HOST, _report())
    with db_api.writer() as session:
        session.execute(models.AttachHandle.__table__.update().values(
            in_use=True))
    host_inventory.apply_report(HOST, [])
    assert _counts()['devices'] == 3


def test_hosts_are_independent(database):
    host_inventory.apply_report(HOST, _report())
    other = manager.annotate(
        fake.FakeDriver(fake.default_host_spec()).discover(), 'compute-2')
    host_inventory.apply_report('compute-2', other)
    assert _counts()['devices'] == 6
    host_inventory.apply_report('compute-2', [])
    assert _counts()['devices'] == 3
    assert len(host_inventory.host_devices(HOST)) == 3


def test_maintenance_status_is_reported_back(database):
    host_inventory.apply_report(HOST, _report())
    with db_api.writer() as session:
        session.execute(models.Device.__table__.update().where(
            models.Device.__table__.c.model == 'Fake FPGA').values(
            status='maintaining'))
    _, statuses = host_inventory.apply_report(HOST, copy.deepcopy(_report()))
    assert sorted(s['status'] for s in statuses.values()) == [
        'enabled', 'enabled', 'maintaining']
