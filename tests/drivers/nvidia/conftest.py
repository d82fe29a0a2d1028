# SPDX-License-Identifier: Apache-2.0
"""The fake NVIDIA host every driver test installs: a fake sysfs and procfs
tree under the test's tmp dir plus the fake NVML, with the driver's
[nvidia] sysfs_root and proc_root pointed at them.
"""

import pytest

from cyborg.conf import CONF
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import driver as nvidia
from cyborg_emulators.nvidia import fake_sysfs


@pytest.fixture
def install_host(tmp_path):
    """install_host(spec, name='sys') -> an installed FakeGpuHost; every
    host made is uninstalled at the end of the test.
    """
    hosts = []

    def install(spec, name='sys'):
        host = fake_sysfs.FakeGpuHost(spec, root=str(tmp_path / name))
        host.install()
        hosts.append(host)
        CONF.set_override('sysfs_root', host.root, group='nvidia')
        CONF.set_override('proc_root', host.proc_root, group='nvidia')
        return host

    yield install
    for host in hosts:
        host.uninstall()


def new_driver(host):
    """The nvidia driver over `host`, NVML retries without delay."""
    return nvidia.NvidiaDriver(backend=nvml.PynvmlBackend(retry_delay=0),
                               sysfs=host.sysfs)
