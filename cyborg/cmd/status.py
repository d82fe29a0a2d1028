# SPDX-License-Identifier: Apache-2.0
"""cyborg-status upgrade check: is this deployment ready to run this code?

Exit code 0 = success, 1 = warning, 2 = failure (oslo.upgradecheck).
Without a database to check ([database] connection unset, e.g. no
--config-file, or naming a SQLite file that is not there) it says so in one
line on stderr and exits 2, without running the checks or creating
anything.
"""

import sys

from oslo_upgradecheck import common_checks
from oslo_upgradecheck import upgradecheck

from cyborg.conf import CONF


class Checks(upgradecheck.UpgradeCommands):

    def check(self):
        from cyborg.db import api as db_api
        try:
            db_api.require_connection(existing=True)
        except db_api.NotConfigured as e:
            print('cyborg-status: %s' % e, file=sys.stderr)
            return upgradecheck.Code.FAILURE
        return super().check()

    def _check_schema(self):
        from cyborg.db import migration
        # The DB layer configures itself from [database] on first use.
        current, head = migration.version(), migration.head()
        if current != head:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                'Database schema is at %s, the code needs %s: run '
                '"cyborg-manage db sync".' % (current, head))
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_stuck_arqs(self):
        from cyborg.db import bindings
        from cyborg.db import migration
        if migration.version() != migration.head():
            return upgradecheck.Result(
                upgradecheck.Code.SUCCESS,
                'Not checked: the schema is not synced yet (see above).')
        # The age at which the conductors' sweep re-drives a bind.
        after = CONF.conductor.bind_stale_after
        stuck = sum(len(a) for a in bindings.bind_started(after).values())
        if stuck:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                '%d accelerator request(s) in BindStarted for more than '
                '%.0fs ([conductor] bind_stale_after); see "cyborg-manage '
                'arq list-stuck" and check that conductors and agents are '
                'running.' % (stuck, after))
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    _upgrade_checks = (
        ('Database schema', _check_schema),
        ('Accelerator requests stuck binding', _check_stuck_arqs),
        ('Policy File JSON to YAML Migration',
         (common_checks.check_policy_json, {'conf': CONF})),
    )


def main(argv=None):
    return upgradecheck.main(CONF, project='cyborg', upgrade_command=Checks(),
                             argv=sys.argv[1:] if argv is None else argv)


if __name__ == '__main__':
    sys.exit(main())
