# SPDX-License-Identifier: Apache-2.0
"""Copying plain data (what JSON holds) cheaply: immutable scalars are
shared, dicts, lists and tuples rebuilt, anything else left to the
caller's own conversion.
"""

SCALARS = frozenset((str, int, float, bool, type(None)))


def copy(value, other, tuples=tuple):
    """A copy of `value`: dicts and lists rebuilt, tuples rebuilt as
    `tuples` (e.g. list, as JSON has no tuple), scalars shared, and every
    other value (at any depth) replaced by other(value).
    """
    kind = type(value)
    if kind in SCALARS:
        return value
    if kind is dict:
        return {copy(k, other, tuples): copy(v, other, tuples)
                for k, v in value.items()}
    if kind is list:
        return [copy(v, other, tuples) for v in value]
    if kind is tuple:
        return tuples(copy(v, other, tuples) for v in value)
    return other(value)
