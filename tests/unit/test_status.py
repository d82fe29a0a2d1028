"""cyborg-status upgrade check."""

from oslo_upgradecheck import upgradecheck

from cyborg.cmd import status
from cyborg.conf import CONF
from cyborg.db import api as db_api
from tests import dbs


def test_migrated_database_passes(sqlite_database):
    checks = status.Checks()
    assert checks._check_schema().code == upgradecheck.Code.SUCCESS
    assert checks._check_stuck_arqs().code == upgradecheck.Code.SUCCESS


def test_unsynced_database_fails_with_the_fix(tmp_path):
    db = dbs.TestDatabase('sqlite')
    try:
        CONF.set_override('connection', db.url, group='database')
        db_api.dispose()
        result = status.Checks()._check_schema()
        stuck = status.Checks()._check_stuck_arqs()
    finally:
        db_api.dispose()
        db.drop()
    assert result.code == upgradecheck.Code.FAILURE
    assert 'cyborg-manage db sync' in result.details
    assert stuck.code == upgradecheck.Code.SUCCESS
    assert 'not synced' in stuck.details
