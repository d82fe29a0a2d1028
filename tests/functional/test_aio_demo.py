# SPDX-License-Identifier: Apache-2.0
"""cyborg-aio's demo on the default fake host (gpu-host): instances
booted the way Nova boots them, and rerun on the same state.
"""

import requests

from tests.functional import aio_common


def test_aio_demo_boots_instances_and_reruns(aio):
    """The demo: profiles created once, two instances booted the way Nova
    boots them, their <hostdev>s and ARQs printed, one GPU left free; a
    restart on the same state replaces the instances instead of failing or
    piling up. Nothing on the terminal but the ready line and the demo.
    """
    from cyborg_aio import demo

    first = aio(demo=True)
    out = first.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
    assert 'demo: 2 of 2 instance(s) booted' in out, out + first.logs()
    assert 'created demo-fpga, demo-gpu-fpga' in out
    # demo-fpga: 2 FPGA functions; demo-gpu-fpga: 1 GPU + 1 function.
    assert out.count('<hostdev mode="subsystem" type="pci" managed="yes">') \
        == 4, out
    assert out.count('bus="0x0c"') == 3, out
    assert ('bus="0x1b"' in out) != ('bus="0x43"' in out), out
    assert out.count('  Bound  ') == 4, out
    arqs = aio_common.demo_arqs(first.api)
    expected = {demo.instance_uuid(name) for name, _ in demo.INSTANCES}
    assert {a['instance_uuid'] for a in arqs} == expected
    assert {a['state'] for a in arqs} == {'Bound'}
    # One H200 is left for the README's next steps.
    resp = requests.get(
        first.placement + '/allocation_candidates',
        params={'resources': 'PGPU:1'}, timeout=10,
        headers={'X-Auth-Token': 'admin',
                 'OpenStack-API-Version': 'placement 1.10'})
    assert len(resp.json()['allocation_requests']) == 1, resp.text
    assert first.stop() == 0, first.logs()
    # Quiet by default: the terminal (stderr) got no log record at all;
    # the INFO log is in the state directory.
    assert first.stderr_lines() == [], first.logs()
    assert 'listening on' in first.logs()

    second = aio(demo=True)
    out = second.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
    assert 'demo: 2 of 2 instance(s) booted' in out, out + second.logs()
    assert 'created' not in out
    again = aio_common.demo_arqs(second.api)
    assert len(again) == 4 and {a['state'] for a in again} == {'Bound'}
    assert not {a['uuid'] for a in again} & {a['uuid'] for a in arqs}
    for instance in expected:
        resp = requests.get('%s/allocations/%s' % (second.placement,
                                                   instance),
                            headers={'X-Auth-Token': 'admin'}, timeout=10)
        assert resp.json()['allocations'], instance
    resp = requests.get(second.api + '/device_profiles', timeout=10)
    assert sorted(p['name'] for p in resp.json()['device_profiles']) == [
        'demo-fpga', 'demo-gpu-fpga']
    assert second.stop() == 0, second.logs()
    assert second.stderr_lines() == [], second.logs()
