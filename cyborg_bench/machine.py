# SPDX-License-Identifier: Apache-2.0
"""What every benchmark records about the run: the machine, the load, the
checkout and when.
"""

import datetime
import os
import platform
import subprocess

from cyborg_harness import cpu

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_revision():
    """Short HEAD, '+dirty' when cyborg/ has local changes; None outside
    a checkout.
    """
    try:
        rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                             cwd=REPO, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', 'cyborg'],
                               cwd=REPO, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return (rev + ('+dirty' if dirty else '')) or None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model():
    return cpu.cpu_model() or platform.processor() or platform.machine()


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec='seconds')


def describe():
    """The fields every benchmark's JSON meta starts with."""
    return {'date': now(), 'cpus': os.cpu_count(),
            'cpu_model': cpu_model(), 'python': platform.python_version(),
            'platform': platform.platform(), 'git': git_revision(),
            'loadavg_start': loadavg()}
