# SPDX-License-Identifier: Apache-2.0
from cyborg.db import device_profiles


def test_create_and_read_profile(database):
    dp = device_profiles.create('5a7d4c36-1d3a-4d8e-9e8f-3c2f43b6f0a1', 'dp',
                                [{'resources:PGPU': '1'}])
    assert device_profiles.get_by_name('dp')['uuid'] == dp['uuid']
