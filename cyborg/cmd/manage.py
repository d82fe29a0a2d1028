"""cyborg-manage: operator commands.

    cyborg-manage [--config-file PATH] db sync [REVISION]
    cyborg-manage [--config-file PATH] db version

`db sync` upgrades [database] connection to REVISION (default: head);
`db version` prints the current revision ("None" for an empty database).
"""

import sys

from oslo_config import cfg

from cyborg.cmd import common
from cyborg.conf import CONF


def db_sync(revision='head'):
    """Upgrade [database] connection to `revision`; returns the revision
    reached."""
    from cyborg.db import migration
    migration.upgrade(revision)
    return migration.version()


def db_version():
    """The database's current revision, None when never synced."""
    from cyborg.db import migration
    return migration.version()


def _run_db_sync():
    print('Database at revision %s' % db_sync(CONF.command.revision))


def _run_db_version():
    print(db_version())


def _add_parsers(subparsers):
    db = subparsers.add_parser('db', help='Database schema commands.')
    db_commands = db.add_subparsers(dest='action', metavar='{sync,version}')
    db_commands.required = True
    sync = db_commands.add_parser(
        'sync', help='Upgrade the schema to REVISION (default: head).')
    sync.add_argument('revision', nargs='?', default='head')
    sync.set_defaults(func=_run_db_sync)
    version = db_commands.add_parser(
        'version', help='Print the current schema revision.')
    version.set_defaults(func=_run_db_version)


command_opt = cfg.SubCommandOpt('command', title='Commands',
                                handler=_add_parsers)

_GLOBAL_WITH_VALUE = ('--config-file', '--config-dir', '--log-file',
                      '--log-dir', '--log-config-append')


def _globals_first(argv):
    """Move oslo's global options in front of the sub-command, so that
    `cyborg-manage db sync --config-file X` works as well."""
    front, rest = [], []
    args = iter(argv)
    for arg in args:
        if arg in _GLOBAL_WITH_VALUE:
            front += [arg, next(args, '')]
        elif arg.startswith(tuple(o + '=' for o in _GLOBAL_WITH_VALUE)):
            front.append(arg)
        else:
            rest.append(arg)
    return front + rest


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    CONF.register_cli_opt(command_opt)
    common.parse_args(_globals_first(argv), log_to_stderr=True)
    from cyborg.db import api as db_api
    db_api.configure()
    try:
        CONF.command.func()
    finally:
        db_api.dispose()
    return 0


if __name__ == '__main__':
    sys.exit(main())
