# SPDX-License-Identifier: Apache-2.0
"""Fake-driver host specs the benchmarks generate (the format of
etc/cyborg/fake-hosts/*.yaml).
"""

# GPU model reported by every simulated GPU (an H200, as in
# etc/cyborg/fake-hosts/gpu-host.yaml).
GPU = {'vendor_id': '10de', 'product_id': '2335', 'model': 'NVIDIA H200'}


def _write(path, lines):
    with open(path, 'w') as f:
        f.write('\n'.join(['# Written by cyborg-bench', 'devices:'] + lines)
                + '\n')


def write_fpgas(path, devices, functions):
    """FPGA cards on buses 0x20.., each with `functions` functions (the
    fake driver numbers them device*8+function from the card's address, so
    8 functions fill one PCI device slot); every function is one attach
    handle.
    """
    if not 1 <= devices <= 0xdf:
        raise ValueError('devices must be 1..223')
    lines = []
    for i in range(devices):
        lines += ['  - type: FPGA',
                  '    vendor_id: "0xabcd"',
                  '    product_id: "0xabcd"',
                  '    model: Bench FPGA',
                  '    pci_address: "0000:%02x:00.0"' % (0x20 + i),
                  '    numa_node: %d' % (i % 2),
                  '    functions: %d' % functions,
                  '    traits: [CUSTOM_FAKE_DEVICE]']
    _write(path, lines)


def write_gpus(path, devices):
    """D GPUs, distinct PCI addresses (one bus each), alternating NUMA."""
    lines = []
    for i in range(devices):
        address = '%04x:%02x:00.0' % (i // 200, 0x10 + i % 200)
        lines += ['  - type: GPU',
                  '    vendor_id: "%s"' % GPU['vendor_id'],
                  '    product_id: "%s"' % GPU['product_id'],
                  '    model: %s' % GPU['model'],
                  '    pci_address: "%s"' % address,
                  '    numa_node: %d' % (i % 2)]
    _write(path, lines)
