# SPDX-License-Identifier: Apache-2.0
"""Combiner: concurrent callers' items are worked in batches, and each
caller returns only once its own items went through."""

import threading

from cyborg.common import combining


class Work:
    """Records batches; the first batch can be held open."""

    def __init__(self, hold_first=False):
        self.batches = []
        self.done = set()
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()
        self.after_calls = 0

    def __call__(self, items):
        self.batches.append(list(items))
        self.entered.set()
        self.release.wait(10)
        if 'boom' in items:
            raise RuntimeError('boom')
        self.done.update(items)

    def after(self):
        self.after_calls += 1


def _caller(combiner, items, returned, work):
    def run():
        combiner.run(items)
        # Everything this caller handed in was worked before it returned.
        returned.append((tuple(items), set(items) <= work.done))
    return threading.Thread(target=run)


def _busy(items, after=False):
    """A combiner whose first caller, on a thread, is inside work() with
    `items` until work.release is set.
    """
    work = Work(hold_first=True)
    combiner = combining.Combiner(work, after=work.after if after else None)
    returned = []
    first = _caller(combiner, items, returned, work)
    first.start()
    assert work.entered.wait(10)
    return work, combiner, returned, first


def test_a_lone_caller_runs_its_items_at_once():
    work = Work()
    combiner = combining.Combiner(work, after=work.after)
    combiner.run(['a', 'b'])
    assert work.batches == [['a', 'b']]
    assert work.after_calls == 1


def test_callers_arriving_meanwhile_share_the_next_batch():
    work, combiner, returned, first = _busy(['a'], after=True)
    others = [_caller(combiner, [x], returned, work) for x in 'bcd']
    for t in others:
        t.start()
    # The followers queue behind the batch in progress.
    while sum(len(t.items) for t in combiner._queued) < 3:
        threading.Event().wait(0.005)
    assert returned == []
    work.release.set()
    for t in [first] + others:
        t.join(10)
    assert work.batches[0] == ['a']
    assert sorted(work.batches[1]) == ['b', 'c', 'd']
    assert len(work.batches) == 2
    assert sorted(returned) == [(('a',), True), (('b',), True),
                                (('c',), True), (('d',), True)]
    assert work.after_calls == 2


def test_a_failing_batch_releases_its_callers_and_the_next_runs():
    work, combiner, returned, first = _busy(['boom'])
    second = _caller(combiner, ['e'], returned, work)
    second.start()
    while not combiner._queued:
        threading.Event().wait(0.005)
    work.release.set()
    first.join(10)
    second.join(10)
    assert sorted(returned) == [(('boom',), False), (('e',), True)]
    combiner.run(['f'])                    # nobody is left "busy"
    assert work.batches[-1] == ['f']


def test_a_caller_that_need_not_wait_leaves_its_items_to_the_worker():
    work, combiner, returned, first = _busy(['a'])
    combiner.run(['b'], wait=False)        # returns while 'a' is worked
    assert 'b' not in work.done
    work.release.set()
    first.join(10)
    assert work.batches == [['a'], ['b']]
    assert work.done == {'a', 'b'}
