# SPDX-License-Identifier: Apache-2.0
"""cyborg.rpc.to_primitive: what oslo's to_primitive gives, as a copy."""

import datetime
import uuid

from oslo_serialization import jsonutils

from cyborg import rpc


class Thing:
    def __init__(self):
        self.name = 'thing'
        self.when = datetime.datetime(2026, 12, 2, 14, 0, 0)


def _sample():
    return {
        'devices': [{'type': 'GPU', 'numa_node': 0, 'ratio': 0.5,
                     'fenced': False, 'model': None,
                     'deployables': [{'traits': ('A', 'B'),
                                      'handles': {'x': [1, 2]}}]}],
        'uuid': uuid.UUID('2e6f3ec4-6d4a-4fa3-9a4b-7d5c1f1c0d11'),
        'when': datetime.datetime(2026, 12, 2, 14, 0, 0),
        'raw': b'bytes',
        'set': {3},
        7: 'int key',
        'thing': Thing(),
    }


def test_same_result_as_oslo():
    value = _sample()
    assert rpc.to_primitive(value) == jsonutils.to_primitive(
        value, convert_instances=True)


def test_result_is_a_copy():
    value = {'a': [{'b': 1}], 't': ({'c': 2},)}
    out = rpc.to_primitive(value)
    out['a'][0]['b'] = 9
    out['t'][0]['c'] = 9
    assert value == {'a': [{'b': 1}], 't': ({'c': 2},)}
    assert out['t'] == [{'c': 9}]


def test_serializer_uses_it():
    serializer = rpc.ContextSerializer()
    value = _sample()
    assert serializer.serialize_entity(None, value) == \
        jsonutils.to_primitive(value, convert_instances=True)
