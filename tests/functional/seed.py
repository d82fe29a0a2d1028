# SPDX-License-Identifier: Apache-2.0
"""Rows the API cannot create itself, for the gabbi fixtures.

Devices, deployables, control-path ids and attach handles come from the
agents, and an ARQ only reaches Bound through the conductor. The gabbits
read and act on these, so the fixtures insert them here. Fixed uuids keep
the YAML readable; integer ids differ per backend (sequences are not reset
between suites), so they are handed to the gabbits as environment
variables ($ENVIRON['GPU_DEPLOYABLE_ID'], ...).
"""

import json

from cyborg.db import api
from cyborg.db import models

GPU_DEVICE = '0d000000-0000-4000-8000-000000000001'
FPGA_DEVICE = '0d000000-0000-4000-8000-000000000002'
GPU_DEPLOYABLE = '0de00000-0000-4000-8000-000000000001'
FPGA_DEPLOYABLE = '0de00000-0000-4000-8000-000000000002'
GPU_RP = '0e000000-0000-4000-8000-000000000001'
FPGA_RP = '0e000000-0000-4000-8000-000000000002'
GPU_RC_ATTRIBUTE = '0a000000-0000-4000-8000-000000000001'
GPU_TRAIT_ATTRIBUTE = '0a000000-0000-4000-8000-000000000002'
FPGA_RC_ATTRIBUTE = '0a000000-0000-4000-8000-000000000003'
GPU_HANDLE = '0a400000-0000-4000-8000-000000000001'
SPARE_HANDLE = '0a400000-0000-4000-8000-000000000002'
BOUND_PROFILE = '0dd00000-0000-4000-8000-000000000001'
BOUND_ARQ = '0aa00000-0000-4000-8000-000000000001'
FAILED_ARQ = '0aa00000-0000-4000-8000-000000000002'
BOUND_INSTANCE = '01000000-0000-4000-8000-000000000001'
BOUND_PROJECT = 'project-bound'
FAILED_DEVICE = '0d000000-0000-4000-8000-000000000003'
LOST_DEVICE = '0d000000-0000-4000-8000-000000000004'

GPU_PCI = {'domain': '0000', 'bus': '3b', 'device': '00', 'function': '0'}


def _insert(session, table_model, **values):
    table = table_model.__table__
    result = session.execute(table.insert().values(**values))
    return result.inserted_primary_key[0]


def inventory():
    """Two hosts: compute-1 with an NVIDIA H200, compute-2 with an FPGA.

    Returns the integer ids the gabbits need, as strings keyed by the
    environment variable names they read.
    """
    with api.writer() as session:
        gpu = _insert(
            session, models.Device, uuid=GPU_DEVICE, type='GPU',
            vendor='10de', model='H200', hostname='compute-1',
            status='enabled',
            std_board_info=json.dumps({'device_id': '0x2335',
                                       'class': '3D controller'}),
            vendor_board_info='', phase='Ready',
            management_state='Orphaned', conditions=json.dumps([{
                'type': 'Ownership', 'status': 'False',
                'reason': 'NoOwner',
                'message': 'bound to vfio-pci with no claim'}]))
        fpga = _insert(
            session, models.Device, uuid=FPGA_DEVICE, type='FPGA',
            vendor='0x8086', model='PAC', hostname='compute-2',
            status='enabled', std_board_info='{}', vendor_board_info='')
        gpu_dep = _insert(
            session, models.Deployable, uuid=GPU_DEPLOYABLE,
            name='compute-1_0000:3b:00.0', num_accelerators=1,
            device_id=gpu, rp_uuid=GPU_RP, driver_name='nvidia')
        fpga_dep = _insert(
            session, models.Deployable, uuid=FPGA_DEPLOYABLE,
            name='compute-2_0000:5e:00.0', num_accelerators=1,
            device_id=fpga, rp_uuid=FPGA_RP, driver_name='intel')
        _insert(session, models.Attribute, uuid=GPU_RC_ATTRIBUTE,
                deployable_id=gpu_dep, key='rc', value='PGPU')
        _insert(session, models.Attribute, uuid=GPU_TRAIT_ATTRIBUTE,
                deployable_id=gpu_dep, key='trait0',
                value='CUSTOM_NVIDIA_H200')
        _insert(session, models.Attribute, uuid=FPGA_RC_ATTRIBUTE,
                deployable_id=fpga_dep, key='rc', value='FPGA')
        cpid = _insert(
            session, models.ControlpathID,
            uuid='0c000000-0000-4000-8000-000000000001', device_id=gpu,
            hostname='compute-1', cpid_type='PCI', cpid_info='0000:3b:00.0')
        handle = _insert(
            session, models.AttachHandle, uuid=GPU_HANDLE,
            deployable_id=gpu_dep, cpid_id=cpid, in_use=True,
            attach_type='PCI', attach_info=json.dumps(GPU_PCI))
        _insert(session, models.AttachHandle, uuid=SPARE_HANDLE,
                deployable_id=gpu_dep, cpid_id=cpid, in_use=False,
                attach_type='PCI', attach_info=json.dumps(GPU_PCI))
        profile = _insert(
            session, models.DeviceProfile, uuid=BOUND_PROFILE,
            name='seeded-gpu', description='Seeded with a bound ARQ',
            profile_json=json.dumps({'groups': [{'resources:PGPU': '1'}]}))
        # What the conductor leaves behind: one ARQ bound to the H200's
        # attach handle, one whose binding failed; both for one instance.
        bound = dict(device_profile_id=profile, device_profile_group_id=0,
                     project_id=BOUND_PROJECT, hostname='compute-1',
                     device_rp_uuid=GPU_RP, instance_uuid=BOUND_INSTANCE)
        _insert(session, models.ExtendedAcceleratorRequest, uuid=BOUND_ARQ,
                state='Bound', attach_handle_id=handle,
                deployable_id=gpu_dep, **bound)
        _insert(session, models.ExtendedAcceleratorRequest, uuid=FAILED_ARQ,
                state='BindFailed', bind_failure='no free attach handle',
                **bound)
    return {'GPU_DEVICE_ID': str(gpu), 'FPGA_DEVICE_ID': str(fpga),
            'GPU_DEPLOYABLE_ID': str(gpu_dep),
            'FPGA_DEPLOYABLE_ID': str(fpga_dep)}


def failed_devices():
    """compute-3: a GPU Failed by XID 48 that nothing holds, and a Lost
    GPU whose attach handle a binding holds (for the reset action).
    """
    with api.writer() as session:
        for uuid, phase, state, address, in_use, reason in (
                (FAILED_DEVICE, 'Failed', 'Unclaimed', '0000:1b:00.0', False,
                 'Xid48'),
                (LOST_DEVICE, 'Lost', 'Managed', '0000:43:00.0', True,
                 'Xid79')):
            device = _insert(
                session, models.Device, uuid=uuid, type='GPU',
                vendor='10de', model='H200', hostname='compute-3',
                status='enabled', std_board_info='{}', vendor_board_info='',
                phase=phase, management_state=state,
                conditions=json.dumps([{
                    'type': 'Healthy', 'status': 'False', 'reason': reason,
                    'message': ''}]))
            dep = _insert(
                session, models.Deployable, uuid=uuid.replace('0d0', '0de'),
                name=address, num_accelerators=8, device_id=device,
                rp_uuid=uuid.replace('0d0', '0e0'), driver_name='nvidia')
            cpid = _insert(
                session, models.ControlpathID, uuid=uuid.replace('0d0', '0c0'),
                device_id=device, hostname='compute-3', cpid_type='PCI',
                cpid_info=address)
            _insert(session, models.AttachHandle,
                    uuid=uuid.replace('0d0', '0a4'), deployable_id=dep,
                    cpid_id=cpid, in_use=in_use, attach_type='PCI',
                    attach_info=json.dumps(GPU_PCI))
