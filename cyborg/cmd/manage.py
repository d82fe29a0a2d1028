# SPDX-License-Identifier: Apache-2.0
"""cyborg-manage: operator commands.

    cyborg-manage [--config-file PATH] db sync [REVISION]
    cyborg-manage [--config-file PATH] db version
    cyborg-manage [--config-file PATH] arq list-stuck [--older-than SECONDS]

`db sync` upgrades [database] connection to REVISION (default: head);
`db version` prints the current revision ("None" for an empty database);
`arq list-stuck` prints the ARQs still in BindStarted SECONDS after Nova
asked to bind them (default [conductor] bind_stale_after, the age at
which the conductors' sweep re-drives a bind): any listed here point at
an agent that does not answer or no conductor running.

Without [database] connection (no --config-file, say), or with one naming
a SQLite file that is not there (`db sync` aside, which creates it), the
command says so in one line on stderr and exits 1, creating nothing.
"""

import sys

from oslo_config import cfg

from cyborg.common import config
from cyborg.conf import CONF


def db_sync(revision='head'):
    """Upgrade [database] connection to `revision`; returns the revision
    reached.
    """
    from cyborg.db import migration
    migration.upgrade(revision)
    return migration.version()


def db_version():
    """The database's current revision, None when never synced."""
    from cyborg.db import migration
    return migration.version()


def stuck_arqs(older_than=None):
    """{instance uuid: [ARQ uuid]} of ARQs BindStarted for older_than s
    (default [conductor] bind_stale_after).
    """
    from cyborg.db import bindings
    if older_than is None:
        older_than = CONF.conductor.bind_stale_after
    return bindings.bind_started(older_than)


def _run_arq_list_stuck():
    older_than = CONF.command.older_than
    if older_than is None:
        older_than = CONF.conductor.bind_stale_after
    stuck = stuck_arqs(older_than)
    for instance, arqs in sorted(stuck.items(), key=lambda i: str(i[0])):
        for arq in arqs:
            print('%s %s' % (instance, arq))
    print('%d ARQ(s) in BindStarted for more than %ds'
          % (sum(len(a) for a in stuck.values()), older_than),
          file=sys.stderr)


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
    arq = subparsers.add_parser('arq', help='Accelerator request commands.')
    arq_commands = arq.add_subparsers(dest='action', metavar='{list-stuck}')
    arq_commands.required = True
    stuck = arq_commands.add_parser(
        'list-stuck', help='Print "INSTANCE ARQ" for every ARQ still in '
                           'BindStarted after --older-than seconds '
                           '(default [conductor] bind_stale_after).')
    stuck.add_argument('--older-than', type=float, default=None,
                       metavar='SECONDS')
    stuck.set_defaults(func=_run_arq_list_stuck)


command_opt = cfg.SubCommandOpt('command', title='Commands',
                                handler=_add_parsers)

_GLOBAL_WITH_VALUE = ('--config-file', '--config-dir', '--log-file',
                      '--log-dir', '--log-config-append')


def _globals_first(argv):
    """Move oslo's global options in front of the sub-command, so that
    `cyborg-manage db sync --config-file X` works as well.
    """
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
    config.parse_args(_globals_first(argv), log_to_stderr=True)
    from cyborg.db import api as db_api
    try:
        db_api.configure(db_api.require_connection(
            existing=CONF.command.func is not _run_db_sync))
    except db_api.NotConfigured as e:
        print('cyborg-manage: %s' % e, file=sys.stderr)
        return 1
    try:
        # [database] max_retries and retry_interval: a command run as the
        # database starts (a deployment's db sync) waits for it.
        db_api.wait_until_reachable()
        CONF.command.func()
    finally:
        db_api.dispose()
    return 0


if __name__ == '__main__':
    sys.exit(main())
