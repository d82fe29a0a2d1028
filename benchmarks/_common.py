"""Helpers the benchmark scripts share (imported from the scripts'
directory, which Python puts on sys.path)."""

import math
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(values, p):
    """Nearest-rank percentile; nan for no values."""
    if not values:
        return float('nan')
    values = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(values)))
    return values[rank - 1]


def git_revision():
    """Short HEAD, '+dirty' when cyborg/ has local changes; None outside
    a checkout."""
    try:
        rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                             cwd=REPO, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', 'cyborg'],
                               cwd=REPO, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return rev + ('+dirty' if dirty else '')
    except (OSError, subprocess.SubprocessError):
        return None
