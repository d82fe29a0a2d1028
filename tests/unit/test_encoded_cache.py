# SPDX-License-Identifier: Apache-2.0
"""The API's caches of encoded answers (cyborg.api.controllers.base):
a hit is what encoding anew gives, anything listed that changed is a
miss, and neither grows past its bound.
"""

import json

from cyborg.api.controllers import base


def _encode(calls):
    def encode(row):
        calls.append(row)
        return json.dumps({'id': row[0], 'name': row[1]})
    return encode


def test_items_are_encoded_once_per_row_and_extra():
    cache = base.EncodedCache()
    calls = []
    rows = [(1, 'a'), (2, 'b')]
    first = cache.many(rows, 'http://x', _encode(calls))
    again = cache.many(list(rows), 'http://x', _encode(calls))
    assert first == again == [json.dumps({'id': 1, 'name': 'a'}),
                              json.dumps({'id': 2, 'name': 'b'})]
    assert calls == rows
    cache.many(rows, 'http://y', _encode(calls))     # another URL
    assert calls == rows + rows


def test_a_whole_list_is_what_building_it_anew_gives():
    calls = []
    lists = base.CollectionCache('things', base.EncodedCache())
    rows = [(1, 'a'), (2, 'b')]
    data = lists.answer(rows, 'http://x', _encode(calls))
    assert isinstance(data, bytes)
    assert json.loads(data) == {'things': [{'id': 1, 'name': 'a'},
                                           {'id': 2, 'name': 'b'}]}
    assert data == base.collection('things', [
        json.dumps({'id': 1, 'name': 'a'}),
        json.dumps({'id': 2, 'name': 'b'})]).encode()
    # The same rows (new tuples, as the driver returns them): the same
    # answer, nothing encoded again.
    assert lists.answer([tuple(r) for r in rows], 'http://x',
                        _encode(calls)) is data
    assert len(calls) == 2


def test_a_changed_added_or_removed_row_is_a_new_list():
    calls = []
    lists = base.CollectionCache('things', base.EncodedCache())
    lists.answer([(1, 'a'), (2, 'b')], 'u', _encode(calls))
    renamed = lists.answer([(1, 'a'), (2, 'c')], 'u', _encode(calls))
    assert json.loads(renamed)['things'][1]['name'] == 'c'
    shorter = lists.answer([(1, 'a')], 'u', _encode(calls))
    assert json.loads(shorter) == {'things': [{'id': 1, 'name': 'a'}]}
    empty = lists.answer([], 'u', _encode(calls))
    assert json.loads(empty) == {'things': []}
    # Each row was encoded once, whichever lists it was in.
    assert calls == [(1, 'a'), (2, 'b'), (2, 'c')]


def test_the_caches_stay_within_their_bounds():
    items = base.EncodedCache(size=3)
    lists = base.CollectionCache('things', items, size=2)
    for n in range(10):
        lists.answer([(n, 'x')], 'u', _encode([]))
        assert len(lists._answers) <= 2
        assert len(items._items) <= 3
