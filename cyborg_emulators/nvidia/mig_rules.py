# SPDX-License-Identifier: Apache-2.0
"""What NVML itself decides for MIG, as the fake NVML reproduces it.

Each rule names the public source it was taken from; the fake's tests
(tests/drivers/nvidia/test_fake_nvml.py) check the rule against the
examples of that source, and against a `tools/nvidia_host_check.py
--mutate` fixture (tests/fixtures/nvml).  Where public captures disagree
(NVML's choices changed between driver branches) the rule follows the MIG
user guide and the disagreement is written down here: the agent never
relies on these choices (it always creates at an explicit placement and
reads the ids back), but the fake must not be kinder than the hardware.
"""

import pynvml as N

# -- compute-instance profiles offered inside a GPU instance --------------
#
# SM slices of a GI -> SM slices of the CI profiles it offers.  Source:
# the MIG user guide (`nvidia-smi mig -lcip` examples: a 4g GI offers 1c,
# 2c and 4c but no 3c; a 3g GI 1c, 2c, 3c) and NVIDIA k8s-test-infra
# pkg/gpu/mocknvml/configs/mock-nvml-config-h100.mig.yaml, whose
# `compute_instances` rows are the `mig -lcip` listing of every H100 GI
# size: 1g {1}, 2g {1, 2}, 3g {1, 2, 3}, 4g {1, 2, 4}, 7g {1, 2, 3, 4, 7}
# (+ the 1_SLICE_REV1 profile on Hopper, each with as many instances as
# 1_SLICE).  The instance count of each is the GI's SM slices // CI's.
CI_SLICES_BY_GI = {1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4),
                   7: (1, 2, 3, 4, 7)}
CI_PROFILE_ENUM = {1: N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                   2: N.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
                   3: N.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                   4: N.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
                   7: N.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE}
CI_REV1 = N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1


def ci_profile_set(gi_sm_slices, hopper_or_newer):
    """[(CI profile enum, SM slices)] a GI of `gi_sm_slices` offers."""
    out = [(CI_PROFILE_ENUM[s], s) for s in CI_SLICES_BY_GI[gi_sm_slices]]
    if hopper_or_newer:
        out.append((CI_REV1, 1))
    return out


# -- GPU-instance ids follow the slot --------------------------------------
#
# A GI's id is fixed by its placement, not "lowest free": on an 8-slice
# board the full GI is 0, 4-slice blocks 1-2, 2-slice blocks 3-6 and
# 1-slice slots 7-14.  Source: MIG user guide, "Getting Started with MIG",
# instance geometry examples: `-cgi 19,14,5` gives GI 13 @6, GI 5 @4 and
# GI 1 @0; `-cgi 9,19,14,19` gives GI 2 @4, 7 @0, 4 @2, 8 @1;
# `-cgi 14,19,19,19,19,19` gives 5 @4, 13 @6, 7 @0, 8 @1, 9 @2, 10 @3.
# Two public captures disagree for 1g GIs (A100 80GB PCIe on 515.86.01 and
# H100 PCIe on 570.169 list 1g GIs 7, 8, 9, 11, 12, 13, 14 after seven
# automatic creates): a real --mutate fixture settles it per driver.
def gi_id(size, start, slice_count):
    """The id NVML gives a GI of `size` memory slices at `start`."""
    return slice_count // size - 1 + start // size


# -- automatic placement (nvmlDeviceCreateGpuInstance) ---------------------
#
# Without a placement NVML picks one that spoils the fewest other
# placements, the lowest start among equals: small profiles fill from the
# top.  It reproduces every sequence of the MIG guide examples above
# (1g x7 on H100: GI 13, 11, 12, 7, 8, 9, 10 -- the 7x 1g.10gb/1g.12gb
# captures of H100 in public write-ups -- and `-cgi 19,19,14,9` failing
# the 3g with InsufficientResources).
def auto_start(profile, profiles, taken, fits):
    """The start NVML picks for `profile` next to `taken` [(profile,
    start)]; `fits(profile, start)` says whether a start is legal now.
    None when nothing fits.
    """
    used = set()
    for other, other_start in taken:
        used.update(range(other_start, other_start + other.size))

    def spoiled(start):
        span = set(range(start, start + profile.size))
        return sum(1 for other in profiles for s in other.starts
                   if not used & set(range(s, s + other.size))
                   and span & set(range(s, s + other.size)))

    starts = [s for s in profile.starts if fits(profile, s)]
    return min(starts, key=lambda s: (spoiled(s), s), default=None)


# -- nvmlDeviceSetMigMode: the return code and activationStatus ------------
#
# Source: NVML reference, nvmlDeviceSetMigMode ("may unbind or reset the
# device to activate the requested mode ... On certain platforms like
# pass-through virtualization, where reset functionality may not be
# exposed directly, VM reboot is required. activationStatus would return
# NVML_ERROR_RESET_REQUIRED for such cases ... if device unbind fails
# because the device isn't idle, NVML_ERROR_IN_USE would be returned";
# "Requires root user": NO_PERMISSION otherwise) and the GPU-to-VM contract
# §5: Ampere on bare metal resets the GPU itself when idle (MIG on at
# once) and stays pending in a pass-through VM or while other clients
# (DCGM, nvidia-persistenced) hold it ("Warning: MIG mode is in pending
# enable state ... In use by another client", MIG user guide); Hopper
# applies at once (the H100 PCIe capture above: "Enabled MIG Mode" and
# mig.mode.current Enabled with no reset) unless compute processes run.
def activation(hopper_or_newer, passthrough_vm, other_clients, processes):
    """(applied now, activationStatus) of a MIG mode change."""
    if processes:
        return False, N.NVML_ERROR_IN_USE
    if hopper_or_newer:
        return True, N.NVML_SUCCESS
    if passthrough_vm:
        return False, N.NVML_ERROR_RESET_REQUIRED
    if other_clients:
        return False, N.NVML_ERROR_IN_USE
    return True, N.NVML_SUCCESS
