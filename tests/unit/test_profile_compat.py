# SPDX-License-Identifier: Apache-2.0
"""Cyborg-style NVIDIA groups → the nvidia driver's groups (the API's
behaviour is in tests/functional/gabbits/cyborg-profiles.yaml)."""

import json

import pytest

from cyborg.api import profile_compat
from cyborg.common import exception
from cyborg.common import gpu_classes
from cyborg.conf import CONF
from cyborg import data

PGPU = {'resources:PGPU': '1', 'trait:CUSTOM_NVIDIA_2335': 'required'}


@pytest.fixture
def nvidia():
    CONF.set_override('gpu_profile_compat', 'nvidia', group='api')


def _resources(group):
    return {k: v for k, v in group.items() if k.startswith('resources:')}


def test_off_by_default_stores_as_sent():
    assert CONF.api.gpu_profile_compat == 'off'
    assert profile_compat.translate_groups([PGPU]) == [PGPU]


def test_whole_gpu_is_the_shipped_whole_profile(nvidia):
    """The translation and the shipped h200-whole profile ask Placement
    for the same thing.
    """
    [group] = profile_compat.translate_groups([PGPU])
    [shipped] = data.profile('h200-whole')[0]['groups']
    assert _resources(group) == _resources(shipped)
    assert {k for k in shipped if k.startswith('trait:')} <= set(group)
    assert json.loads(group['accel:cyborg_group']) == PGPU


def test_translation_is_idempotent(nvidia):
    """A GET's groups posted again (a profile copied to another cloud)
    stay as they are.
    """
    once = profile_compat.translate_groups([
        PGPU, {'resources:VGPU': '1',
               'trait:CUSTOM_NVIDIA_2335_H200X_3_71C': 'required'}])
    assert profile_compat.translate_groups(once) == once


def test_forbidden_product_trait_is_not_a_product(nvidia):
    group = {'resources:PGPU': '1', 'trait:CUSTOM_NVIDIA_2335': 'forbidden'}
    assert profile_compat.translate_group(group) == group


def test_two_products_in_one_group(nvidia):
    with pytest.raises(exception.Invalid) as e:
        profile_compat.translate_group(dict(
            PGPU, **{'trait:CUSTOM_NVIDIA_20B2': 'required'}))
    assert str(e.value) == ('A resources:PGPU group requires one NVIDIA '
                            'product, not CUSTOM_NVIDIA_20B2, '
                            'CUSTOM_NVIDIA_2335.')


@pytest.mark.parametrize('group, count', [
    ({'resources:VGPU': '1'}, 1),                       # Cyborg's vGPU
    ({'resources:VGPU': '2'}, 2),
    ({'resources:VGPU': '1', 'resources:CUSTOM_GPU_MEM_SLICE': '1',
      'resources:CUSTOM_GPU_COMPUTE_SLICE': '1'}, 1),   # our vGPU
    ({'resources:CUSTOM_GPU_MEM_SLICE': '8'}, 1),       # whole / MIG
    ({'resources:PGPU': '2'}, 2),
    ({'resources:FPGA': '1', 'resources:CUSTOM_GPU_MEM_SLICE': '1'}, 2),
    ({'trait:CUSTOM_X': 'required'}, 0),
])
def test_accelerators_in_group(group, count):
    assert gpu_classes.accelerators_in_group(group) == count
