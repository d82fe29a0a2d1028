# SPDX-License-Identifier: Apache-2.0
"""Times read as the text the database keeps, where the driver would parse
them in Python.

PyMySQL turns every DATETIME value it receives into a datetime with a
regular expression and a few conversions in Python, about 2 µs a value:
a list of 200 profiles spent about a sixth of its CPU there, before
anything could tell whether the value was needed (the API keeps each
listed profile's answer per stored row, and reads the time of a row it
has answered before only to find that answer). Selected through
as_stored(), a DATETIME column is read on MariaDB as the text of its value
(CAST(... AS CHAR): the same 'YYYY-MM-DD HH:MM:SS[.ffffff]' the server
sends for a DATETIME, so the same instant) and parsed by
datetime.fromisoformat() when the row is processed; with a stored read
(api.read_stored()), only for a row that is. Elsewhere the column is
selected as it is: SQLite's values are text already (SQLAlchemy parses
them when the row is processed), and psycopg2 parses PostgreSQL's in C.
"""

import datetime

import sqlalchemy as sa
from sqlalchemy.ext import compiler
from sqlalchemy.sql import expression
from sqlalchemy.sql import visitors


class _Text(expression.ColumnElement):
    """A DATETIME column, selected as its text on MariaDB."""

    inherit_cache = True
    _traverse_internals = [
        ('column', visitors.InternalTraversal.dp_clauseelement)]

    def __init__(self, column):
        self.column = column
        self.type = column.type


@compiler.compiles(_Text)
def _as_is(element, sql_compiler, **kw):
    return sql_compiler.process(element.column, **kw)


@compiler.compiles(_Text, 'mysql')
def _as_text(element, sql_compiler, **kw):
    return 'CAST(%s AS CHAR)' % sql_compiler.process(element.column, **kw)


class StoredTime(sa.types.TypeDecorator):
    """DateTime, read as _Text on MariaDB and parsed by _parsed(); as
    DateTime is elsewhere (no extra call per value).
    """

    impl = sa.DateTime
    cache_ok = True

    def column_expression(self, column):
        return _Text(column)

    def result_processor(self, dialect, coltype):
        if dialect.name == 'mysql':
            return _parsed
        return self.impl_instance.dialect_impl(dialect).result_processor(
            dialect, coltype)


def _parsed(value):
    """The datetime of a DATETIME's text (None stays None)."""
    if type(value) is not str:
        return value
    try:
        return datetime.datetime.fromisoformat(value)
    except ValueError:
        # What PyMySQL gives for a value no datetime can hold (MariaDB's
        # zero date): the text.
        return value


def as_stored(column):
    """`column` (a DATETIME one) to select: read as described above,
    labelled with its own name.
    """
    return sa.type_coerce(column, StoredTime()).label(column.name)
