# SPDX-License-Identifier: Apache-2.0
"""Cyborg-style NVIDIA GPU request groups → the nvidia driver's, at
device profile creation ([api] gpu_profile_compat = nvidia).

Cyborg's GPU driver gives each physical GPU a provider with `PGPU` = 1 and
the trait CUSTOM_NVIDIA_<PRODUCT ID> (e.g. CUSTOM_NVIDIA_2335 for an
H200), and each vGPU-configured GPU a provider with `VGPU` = its
instances and CUSTOM_NVIDIA_<PRODUCT ID>_<TYPE>, where TYPE is the mdev
type's name without its first word, dashes made underscores ("NVIDIA
H200X-1-18C" → CUSTOM_NVIDIA_2335_H200X_1_18C); openstack/cyborg
cyborg/accelerator/drivers/gpu/nvidia/sysinfo.py `_get_traits`. Flavors
point at profiles written for those.

The nvidia driver reports one provider per GPU whose MIG slices and
engines every use draws on (docs/nvidia-gpus.md): a whole GPU is all of
them, a vGPU its GPU instance's share (MIG-backed) or 1/n of the GPU
(time-sliced, n per GPU) plus one `VGPU` (a VF). So, per group:

- `resources:PGPU=1` + required CUSTOM_NVIDIA_<id>: the whole-GPU vector
  of that product (GPU model tables, cyborg/drivers/nvidia/models) +
  CUSTOM_GPU_MODEL_<model> + CUSTOM_GPU_PASSTHROUGH_CAPABLE;
- `resources:VGPU=1` + required CUSTOM_NVIDIA_<id>_<TYPE>: the type's
  vector + `VGPU` 1 + CUSTOM_VGPU_<TYPE> (the trait the driver publishes
  while one more vGPU of the type can be placed) + CUSTOM_NVIDIA_<id>.
  A MIG-backed type <board>-<g>-<GB>C[ME] is the GPU instance profile
  <g>g.<GB>gb[+me] of the model; a time-sliced one <board>-<GB>C fits n =
  the GPU's memory // its framebuffer times per GPU.

A translated group keeps the group as sent, as JSON, under
`accel:cyborg_group` (Nova ignores accel:* keys): GET shows both. Other
traits and accel:* keys are kept. Groups in another form (the driver's
own, other vendors' PGPU) are stored as sent. What cannot be translated
(an unknown product or vGPU type, more than one GPU in a group, PGPU or
VGPU mixed with other resources, a VGPU group naming no type) is a 400
naming what would be valid.
"""

import glob
import json
import os
import re

from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.drivers.nvidia import models
from cyborg.drivers.nvidia import resources

OFF = 'off'
NVIDIA = 'nvidia'
ORIGINAL_KEY = 'accel:cyborg_group'
PGPU = 'PGPU'
VGPU = 'VGPU'
PASSTHROUGH_TRAIT = 'CUSTOM_GPU_PASSTHROUGH_CAPABLE'
MODEL_TRAIT = 'CUSTOM_GPU_MODEL_'
VGPU_TRAIT = 'CUSTOM_VGPU_'
PRODUCT_TRAIT = re.compile(r'^CUSTOM_NVIDIA_([0-9A-F]{4})$')
VGPU_TYPE_TRAIT = re.compile(r'^CUSTOM_NVIDIA_([0-9A-F]{4})_([A-Z0-9_]+)$')
# Type names without their first word, trait-cased: BOARD_G_GBC[ME] is
# MIG-backed, BOARD_GBC time-sliced (NVIDIA vGPU for Compute type names;
# NVIDIA/vgpu-device-manager pkg/types/vgpu_type.go).
MIG_BACKED = re.compile(r'^([A-Z0-9]+)_([0-9]+)_([0-9]+)C(ME)?$')
TIME_SLICED = re.compile(r'^([A-Z0-9]+)_([0-9]+)C$')
GIB = 1 << 30
MIB = 1 << 20


def enabled():
    return CONF.api.gpu_profile_compat == NVIDIA


def translate_groups(groups):
    """The groups to store for `groups` (validated, canonical keys)."""
    if not enabled():
        return groups
    return [translate_group(g) for g in groups]


def _resources(group):
    return {k.split(':', 1)[1]: int(v) for k, v in group.items()
            if k.startswith('resources:')}


def _required(group):
    return [k.split(':', 1)[1] for k, v in group.items()
            if k.startswith('trait:') and v == 'required']


def translate_group(group):
    rcs = _resources(group)
    legacy = [rc for rc in (PGPU, VGPU) if rc in rcs]
    if not legacy:
        return group
    required = _required(group)
    if legacy == [VGPU] and any(t.startswith(VGPU_TRAIT) for t in required):
        return group        # already the nvidia driver's vGPU form
    rc = legacy[0]
    if PGPU == rc and not any(PRODUCT_TRAIT.match(t) for t in required):
        return group        # any vendor's PGPU provider (pci driver)
    others = sorted(set(rcs) - {rc})
    if others:
        raise exception.Invalid(
            'A Cyborg-style group asks for resources:%s alone; this one '
            'also asks for %s. Ask for them in separate groups.'
            % (rc, ', '.join('resources:' + o for o in others)))
    if rcs[rc] != 1:
        raise exception.Invalid(
            'resources:%s=%d: every NVIDIA GPU is its own provider, so a '
            'group gets one %s; ask for %d groups of resources:%s=1 '
            'instead.' % (rc, rcs[rc], 'GPU' if rc == PGPU else 'vGPU',
                          rcs[rc], rc))
    if rc == PGPU:
        return _whole_gpu(group, required)
    return _vgpu(group, required)


def _model(product_id):
    model = models.by_product_id(product_id.lower())
    if model is None:
        raise exception.Invalid(
            'No NVIDIA GPU model table for product id %s; known: %s. Write '
            'the profile in the nvidia driver\'s form (docs/nvidia-gpus.md).'
            % (product_id, _known_products()))
    return model


def _known_products():
    """'2335 (NVIDIA H200), ...': the products with a model table."""
    known = {}
    for path in glob.glob(os.path.join(models.DIR, '*.json')):
        device = models.load(path)['devices'][0]
        known['%04X' % (device['pci']['pciDeviceId'] >> 16)] = \
            device['name']
    return ', '.join('%s (%s)' % item for item in sorted(known.items()))


def _kept(group, dropped_traits=()):
    """Traits (but `dropped_traits`) and accel:* keys of the group."""
    return {k: v for k, v in group.items()
            if k.startswith('accel:') or (
                k.startswith('trait:') and
                k.split(':', 1)[1] not in dropped_traits)}


def _build(group, vector, traits, dropped_traits=()):
    out = {'resources:%s' % rc: str(n) for rc, n in sorted(vector.items())}
    out.update(_kept(group, dropped_traits))
    for trait in traits:
        out['trait:' + trait] = 'required'
    out[ORIGINAL_KEY] = json.dumps(group, sort_keys=True,
                                   separators=(',', ':'))
    return out


def _whole_gpu(group, required):
    products = {PRODUCT_TRAIT.match(t).group(1) for t in required
                if PRODUCT_TRAIT.match(t)}
    if len(products) != 1:
        raise exception.Invalid(
            'A resources:PGPU group requires one NVIDIA product, not %s.'
            % ', '.join('CUSTOM_NVIDIA_' + p for p in sorted(products)))
    model = _model(products.pop())
    vector = resources.totals(model['profiles'])
    return _build(group, vector, (
        MODEL_TRAIT + resources.model_name(model['name']),
        PASSTHROUGH_TRAIT))


def _vgpu(group, required):
    named = [(t, VGPU_TYPE_TRAIT.match(t)) for t in required
             if VGPU_TYPE_TRAIT.match(t) and not PRODUCT_TRAIT.match(t)]
    if len(named) != 1:
        raise exception.Invalid(
            'A resources:VGPU group names its vGPU type: require exactly '
            'one trait:CUSTOM_NVIDIA_<product id>_<type> (Cyborg\'s form, '
            'e.g. CUSTOM_NVIDIA_2335_H200X_1_18C) or the nvidia driver\'s '
            'trait:CUSTOM_VGPU_<type> with the type\'s resources; this '
            'group requires %s.' % (', '.join(t for t, _ in named)
                                    or 'none'))
    trait, match = named[0]
    product_id, type_name = match.groups()
    model = _model(product_id)
    vector = _vgpu_vector(model, type_name)
    if vector is None:
        raise exception.Invalid(
            '%s: the %s has no vGPU type %s; its types are %s.'
            % (trait, model['name'], type_name,
               ', '.join(_vgpu_names(model, type_name))))
    vector[VGPU] = 1
    return _build(group, vector, (VGPU_TRAIT + type_name,
                                  'CUSTOM_NVIDIA_' + product_id),
                  dropped_traits=(trait,))


def _vgpu_vector(model, type_name):
    mig = MIG_BACKED.match(type_name)
    if mig:
        _, g, gb, media = mig.groups()
        profile = '%sg.%sgb%s' % (g, gb, '+me' if media else '')
        for p in model['profiles']:
            if p.name == profile:
                return resources.profile_vector(p)
        return None
    sliced = TIME_SLICED.match(type_name)
    if not sliced:
        return None
    framebuffer = int(sliced.group(2)) * GIB
    if framebuffer > model['memory_total'] + GIB:
        return None
    totals = resources.totals(model['profiles'])
    n = max(1, model['memory_total'] // framebuffer)
    return {resources.MEM_SLICE: max(1, totals[resources.MEM_SLICE] // n),
            resources.COMPUTE_SLICE: max(
                1, totals[resources.COMPUTE_SLICE] // n)}


def _vgpu_names(model, type_name):
    """The type names (trait form) the model has, on the asked type's
    board: every MIG-backed one and the time-sliced pattern.
    """
    board = type_name.split('_', 1)[0]
    names = []
    for p in model['profiles']:
        g, _, rest = p.name.partition('g.')
        gb, _, media = rest.partition('gb')
        names.append('%s_%s_%sC%s' % (board, g, gb,
                                      'ME' if media == '+me' else ''))
    gib = model['memory_total'] // GIB
    names.append('%s_<GB>C (time-sliced, GB at most %d)' % (board, gib))
    return names
