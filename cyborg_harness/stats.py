# SPDX-License-Identifier: Apache-2.0
"""Percentiles of measured samples."""

import math


def percentile(values, p):
    """Nearest-rank percentile `p` (0-100] of `values` (any order); None
    when there are none.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]
