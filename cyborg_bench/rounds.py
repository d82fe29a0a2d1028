# SPDX-License-Identifier: Apache-2.0
"""Side-by-side rows of several interleaved rounds, merged into one.

On a shared machine the speed of either side drifts by tens of percent
within minutes, so a ratio from one run of each side, one after the
other, says as much about when each ran as about the code.
``cyborg-bench side-by-side --rounds N`` measures both sides N times,
alternating, and reports the median of each figure over the rounds, with
each round's ratios beside it so the spread shows.

Each round gives rows as side_by_side.one_client_rows() makes them; here
they are merged: one row per (workload, rows), each figure the median over
the rounds that have it (a ratio is the median of the rounds' ratios, not
the ratio of the medians), errors summed, and the round's own figures
kept in the row's ``rounds`` list.
"""

import statistics

from cyborg_bench import stats


def significant(digits):
    return lambda x: float('%.*g' % (digits, x))


def places(digits):
    return lambda x: round(x, digits)


# Figures that are medians, rounded as one run's figure is.
MEDIAN = {
    'ours_ops_per_s': significant(4), 'ref_ops_per_s': significant(4),
    'ours_p50_ms': places(3), 'ours_p99_ms': places(3),
    'ref_p50_ms': places(3), 'ref_p99_ms': places(3),
    'ratio': significant(3), 'p50_ratio': significant(3),
    'ratio_at_least': round, 'p50_ratio_at_least': round,
    'ref_ok': round, 'share_of_floor': places(3),
    'limit_p50_ms': places(3), 'p50_over_limit': places(2),
    'p50_ratio_at_limit': significant(3),
}
# Figures summed over the rounds: a wrong answer in any round counts.
SUM = ('ours_errors', 'ref_errors')
# True when true in any round.
ANY = ('ref_time_capped',)
# What each round keeps of its row (those it has).
PER_ROUND = ('ratio', 'p50_ratio', 'ratio_at_least', 'p50_ratio_at_least',
             'p50_over_limit', 'limit_p50_ms', 'p50_ratio_at_limit',
             'ours_ops_per_s',
             'ours_p50_ms', 'ref_ops_per_s', 'ref_p50_ms')


def merge(per_round, orders=None, median=MEDIAN, summed=SUM,
          kept=PER_ROUND):
    """One row per (workload, rows) of `per_round` (a list, one list of
    rows per round), in the first round's order; `orders` names each
    round's side that ran first. `median` (MEDIAN by default: the
    side-by-side's rows) maps each figure that is a median over the
    rounds to its rounding, `summed` names those summed, and `kept` those
    each round keeps in the row's 'rounds'.
    """
    keys = []
    by_key = {}
    for n, rows in enumerate(per_round):
        for row in rows:
            key = (row['workload'], row.get('rows'))
            if key not in by_key:
                keys.append(key)
                by_key[key] = []
            by_key[key].append((n, row))
    merged = []
    for key in keys:
        found = by_key[key]
        out = {}
        for _, row in found:
            for name, value in row.items():
                out.setdefault(name, value)     # the first round's text
        for name, rounding in median.items():
            values = [row[name] for _, row in found
                      if row.get(name) is not None]
            if values:
                out[name] = rounding(statistics.median(values))
        for name in summed:
            if any(name in row for _, row in found):
                out[name] = sum(row.get(name, 0) for _, row in found)
        for name in ANY:
            if any(name in row for _, row in found):
                out[name] = any(row.get(name) for _, row in found)
        out['rounds'] = []
        for n, row in found:
            one = {'round': n + 1}
            if orders:
                one['first'] = orders[n][0]
            one.update((k, row[k]) for k in kept if k in row)
            out['rounds'].append(one)
        merged.append(out)
    return merged


def median_of(docs, keys):
    """{key: median} of the numeric `keys` over `docs` (dicts)."""
    out = {}
    for key in keys:
        values = [d[key] for d in docs if d.get(key) is not None]
        if values:
            out[key] = statistics.median(values)
    return out


def _times(values, bound=False):
    # Bounds as the main table writes them (whole numbers).
    if bound:
        return ', '.join('> %s×' % v for v in values)
    return ', '.join('%s×' % stats.num(v) for v in values)


def table(rows, rounds):
    """The per-round figures in Markdown: each round's ratios and p50 /
    limit per workload, then each round's floor and which side went first.
    `rounds` is a list of dicts with first, floor_p50_ms, commit_ms.
    """
    lines = ['| workload | rows | ratio (op/s), round 1…%d | ratio (p50) '
             '| ours p50 / limit |' % len(rounds),
             '|---|---:|---|---|---|']
    for r in rows:
        if 'rounds' not in r:
            continue
        per = r['rounds']
        if any('ratio_at_least' in one for one in per):
            ratio = _times([one['ratio_at_least'] for one in per
                            if 'ratio_at_least' in one], bound=True)
            p50 = _times([one['p50_ratio_at_least'] for one in per
                          if 'p50_ratio_at_least' in one], bound=True)
        else:
            ratio = _times([one['ratio'] for one in per if 'ratio' in one])
            p50 = _times([one['p50_ratio'] for one in per
                          if 'p50_ratio' in one])
        limit = ', '.join('%.2f×' % one['p50_over_limit'] for one in per
                          if 'p50_over_limit' in one)
        lines.append('| %s | %s | %s | %s | %s |' % (
            r['workload'], '{:,}'.format(r['rows']) if r.get('rows') else '',
            ratio or '–', p50 or '–', limit or '–'))
    lines += ['', '| round | first | floor p50 ms | commit p50 ms |',
              '|---:|---|---:|---:|']
    for n, rnd in enumerate(rounds):
        lines.append('| %d | %s | %s | %s |' % (
            n + 1, rnd.get('first', ''), rnd.get('floor_p50_ms', ''),
            rnd.get('commit_ms', '')))
    return '\n'.join(lines)
