# SPDX-License-Identifier: Apache-2.0
"""The harness itself: a deployment binds a burst with no fault."""

from tests.faults import burst as fault_burst


def test_no_fault_binds_everything(deployment):
    deployment.profile()
    burst = fault_burst.Burst(deployment, deployment.create_arqs(10),
                              interval=0).run()
    tally = fault_burst.settle(deployment, burst, timeout=60)
    fault_burst.report('fault: none (baseline)', tally)
    assert tally['bound'] == 10
