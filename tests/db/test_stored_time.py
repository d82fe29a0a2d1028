# SPDX-License-Identifier: Apache-2.0
"""Times selected through cyborg.db.stored_time.as_stored(): on MariaDB
read as the stored text (not parsed by PyMySQL) and parsed when the row is
processed; elsewhere as any DateTime column. Either way a profile's and an
ARQ's times are the datetimes stored.
"""

import datetime

import pymysql.converters
import pytest
import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import arqs
from cyborg.db import device_profiles
from cyborg.db import stored_time
from tests.db import seed

DP = seed.DP
ARQ = seed.ARQ


def _stored(column, where):
    """`column` of the row `where` picks, as a plain SELECT reads it."""
    with api.reader() as session:
        return session.execute(sa.select(column).where(where)).scalar_one()


def test_a_profiles_times_are_those_stored(database):
    made = seed.profile()
    created = _stored(DP.c.created_at, DP.c.uuid == made['uuid'])
    assert isinstance(created, datetime.datetime)
    for dp in (device_profiles.get_by_uuid(made['uuid']),
               device_profiles.get_by_name(made['name'], stored=True),
               device_profiles.list_()[0]):
        assert (dp['created_at'], dp['updated_at']) == (created, None)
    rows, decode = device_profiles.list_stored()
    assert decode(rows[0])['created_at'] == created
    # A page after a marker: read in a transaction, through SQLAlchemy's
    # own execution rather than a Prepared statement's.
    after = seed.profile()
    later = _stored(DP.c.created_at, DP.c.uuid == after['uuid'])
    assert [dp['created_at'] for dp in device_profiles.list_(
        marker=made['uuid'])] == [later]
    rows, decode = device_profiles.list_stored(marker=made['uuid'])
    assert [decode(row)['created_at'] for row in rows] == [later]


def test_an_arqs_times_are_those_stored(database):
    arq = seed.arq_requests()[0]
    created = _stored(ARQ.c.created_at, ARQ.c.uuid == arq['uuid'])
    assert arqs.get(arq['uuid'])['created_at'] == created
    assert [a['created_at'] for a in arqs.list_()] == [created]


def test_mariadb_sends_the_text_and_pymysql_parses_no_time(mariadb, sent,
                                                           monkeypatch):
    made = seed.profile()
    parsed = []
    real = pymysql.converters.convert_datetime

    def counted(value):
        parsed.append(value)
        return real(value)
    # The converters each new PyMySQL connection copies.
    monkeypatch.setitem(pymysql.converters.conversions,
                        pymysql.constants.FIELD_TYPE.DATETIME, counted)
    api.configure(mariadb.url)          # new connections
    device_profiles.list_()
    device_profiles.get_by_uuid(made['uuid'])
    arqs.list_()
    reads = [sql for _, sql in sent if 'FROM device_profiles' in sql
             or 'FROM extended_accelerator_requests' in sql]
    assert len(reads) == 3
    assert all('CAST(device_profiles.created_at AS CHAR) AS created_at' in sql
               or 'CAST(extended_accelerator_requests.created_at AS CHAR) '
               'AS created_at' in sql for sql in reads)
    assert parsed == []
    # A DATETIME selected as it is: PyMySQL parses it (on the same
    # connections: the count above is not for want of a patched one).
    api.read(api.Prepared(sa.select(DP.c.created_at)))
    assert len(parsed) == 1


def test_elsewhere_the_column_is_selected_as_it_is(database):
    statement = sa.select(stored_time.as_stored(DP.c.created_at))
    sql = str(statement.compile(dialect=api.get_engine().dialect))
    if database.backend == 'mysql':
        assert 'CAST(device_profiles.created_at AS CHAR) AS created_at' in sql
    else:
        assert 'device_profiles.created_at AS created_at' in sql
        assert 'CAST' not in sql


@pytest.mark.parametrize('text,value', [
    ('2026-12-06 14:37:24', datetime.datetime(2026, 12, 6, 14, 37, 24)),
    ('2026-12-06 14:37:24.104133',
     datetime.datetime(2026, 12, 6, 14, 37, 24, 104133)),
    # MariaDB's zero date, which no datetime holds: its text, as PyMySQL
    # gives it.
    ('0000-00-00 00:00:00', '0000-00-00 00:00:00'),
    (None, None),
])
def test_the_text_is_parsed_as_pymysql_would(text, value):
    assert stored_time._parsed(text) == value
    if text is not None:
        assert pymysql.converters.convert_datetime(text) == value
