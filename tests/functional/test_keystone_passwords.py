# SPDX-License-Identifier: Apache-2.0
"""The real Keystone cyborg-aio runs (cyborg_aio.keystone) starts with
whatever passwords its personas were given: secrets.token_urlsafe() may
begin one with '-', which keystone-manage bootstrap once took for an
option and refused (CI, 2026-12-05: every Keystone test of that run
errored at set-up).
"""

import json
import os

from cyborg_aio import keystone
from tests import dbs


def test_an_admin_password_beginning_with_a_dash(tmp_path):
    dbs.require_keystone()
    # What an earlier start left, which start() reads back.
    with open(os.path.join(str(tmp_path), 'passwords.json'), 'w') as f:
        json.dump({'admin': '-T99rcTx6r3hixvJrRpLvA'}, f)
    server = keystone.Keystone(tmp_path).start()
    try:
        assert server.passwords['admin'] == '-T99rcTx6r3hixvJrRpLvA'
        assert server.token('admin')
    finally:
        server.stop()
