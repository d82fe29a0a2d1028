# SPDX-License-Identifier: Apache-2.0
"""Latency summaries of client-side samples (nearest-rank percentiles,
cyborg_harness.stats), and their figures in Markdown tables.
"""

from cyborg_harness import stats


# Milliseconds are kept to the microsecond: the ratios and limits made
# of them (side-by-side, per-db) are of latencies of 0.08-0.2 ms, where
# a figure rounded to 0.01 ms could be off by 6 %.
DIGITS = 3


def summarize(seconds):
    """n, p50/p90/p99/max/mean in milliseconds of a list of seconds."""
    values = sorted(seconds)
    out = {'n': len(values)}
    if not values:
        return out
    for p in (50, 90, 99):
        out['p%d_ms' % p] = round(stats.percentile(values, p) * 1000,
                                  DIGITS)
    out['max_ms'] = round(values[-1] * 1000, DIGITS)
    out['mean_ms'] = round(sum(values) / len(values) * 1000, DIGITS)
    return out


def fmt(summary, key, digits=1):
    """One figure of a summary for a Markdown table ('—' when absent)."""
    value = summary.get(key)
    return '—' if value is None else '%.*f' % (digits, value)


def num(x):
    """3 significant digits below 100, whole numbers above."""
    return '%.3g' % x if x < 100 else '{:,}'.format(round(x))
