# SPDX-License-Identifier: Apache-2.0
"""Side by side: our API, the reference Cyborg and a no-op app, under the
same uWSGI set-up, driven by the same ``cyborg-bench load`` workloads.

One command::

    cyborg-bench side-by-side [--quick] [--json FILE]

1. The reference, ``openstack-cyborg==17.0.0`` from PyPI, and ``uwsgi`` go
   into their own virtualenv, ``.bench/ref-venv`` (python3.11 -m venv;
   never into ours), unless already there. The same uWSGI binary serves all
   three apps (``--home`` picks each one's virtualenv).
2. Each stack gets a SQLite database in a temp dir: ours migrated by
   ``cyborg-manage db sync``, the reference's by ``cyborg-dbsync
   create_schema`` (its ``upgrade`` stops on SQLite at ``ALTER TABLE ...
   ALTER COLUMN``, which SQLite lacks). The reference has no noauth mode:
   its paste pipeline gets a tiny filter in place of ``authtoken`` that
   sets an admin identity. It creates profiles and ARQs through its
   conductor over RPC, so ``cyborg-conductor`` runs too, on the local
   RabbitMQ (a vhost of its own, deleted at the end), with
   ``[placement]`` pointed at a version-document stub (the conductor only
   asks Placement for its version at start-up on these paths).
3. uWSGI: ``--http-socket`` on loopback, master, 2 processes × 1 thread,
   lazy-apps, for ours (``cyborg.wsgi.api``), the reference
   (``cyborg.wsgi.api`` of its venv) and the floor (``cyborg.wsgi.floor``:
   ``GET /`` answers ``{}``, the list path an answer of the list's size;
   the limits, LIST_FLOOR and LIMIT_OF, start from them).
4. ``cyborg-bench load`` runs the same workloads against each, one
   client; ours also at concurrency 4/16/64. Rows for the table-size
   workloads are cloned straight into each database (``--seed-db``).
5. Bind and PATCH→event need a conductor and an agent with attach handles
   and a Nova events receiver: for ours that is cyborg-aio with a fake FPGA
   host (as ``cyborg-bench bind``); for the reference they are reported
   as not run (it would need its agent with real devices, Placement and a
   Keystone catalog).
6. Prints the table of ratios and writes everything as JSON.

With --rounds N the three servers are up at once and the one-client
workloads alternate between ours and the reference over N rounds of
requests/N operations, each round with its own floor; the table shows
medians (cyborg_bench/rounds.py).

The reference's slow workloads are bounded by time: a measurement starts no
new request after --time-limit seconds, and what finished is reported.
See docs/benchmarks/side-by-side.md for a run's figures.
"""

import argparse
import http.server
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from cyborg_harness import aio as harness_aio
from cyborg_harness import net
from cyborg_harness import processes
from cyborg_harness import rabbit

from cyborg_bench import hostspec
from cyborg_bench import machine
from cyborg_bench import profile
from cyborg_bench import rounds
from cyborg_bench import stats

REPO = machine.REPO
REF_VENV = os.path.join(REPO, '.bench', 'ref-venv')
REF_PACKAGE = 'openstack-cyborg==17.0.0'
OUR_VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
BENCH = [sys.executable, '-m', 'cyborg_bench', 'load']
ADMIN_PROJECT = uuid.uuid5(uuid.NAMESPACE_DNS, 'cyborg-bench').hex
FPGA_GROUPS = [{'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]
NO_BIND = ('the reference binds through its conductor and agent: that '
           'needs the agent with real (or its fake) devices reported to '
           'Placement and a Keystone catalog for Nova; not set up here')

# Workloads compared (one client each): (name in the results, rows).
COMPARED = ['noop', 'dp-create', 'dp-get', 'dp-delete', 'dp-list',
            'arq-create', 'lookup', 'arq-list', 'boot']
PROFILES = {
    'full': dict(requests=300, time_limit=30.0, sizes=[1000, 10000, 100000],
                 concurrency=[1, 4, 16, 64], ref_time_limit=30.0,
                 bind_requests=100),
    'quick': dict(requests=30, time_limit=8.0, sizes=[1000, 5000],
                  concurrency=[1, 4], ref_time_limit=8.0, bind_requests=10),
}


def log(msg):
    print('[cyborg-bench side-by-side %s] %s'
          % (time.strftime('%H:%M:%S'), msg),
          file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# The reference's virtualenv


# What the reference needs besides itself and uWSGI to be served as ours
# is by cyborg-bench per-db: gunicorn, and the MariaDB and PostgreSQL
# drivers; each at the version our virtualenv has.
REF_EXTRAS = ('gunicorn', 'PyMySQL', 'psycopg2-binary')


def ensure_ref_venv():
    """Create .bench/ref-venv with the reference and uwsgi unless there,
    and add REF_EXTRAS at our versions unless there. Returns the
    reference's and uWSGI's versions.
    """
    py = os.path.join(REF_VENV, 'bin', 'python')
    probe = [py, '-c', 'import importlib.metadata as m; '
             'print(m.version("openstack-cyborg"), m.version("uwsgi"))']
    pip = [os.path.join(REF_VENV, 'bin', 'pip'), 'install', '-q']
    done = None
    if os.path.exists(py):
        done = subprocess.run(probe, capture_output=True, text=True)
    if done is None or done.returncode != 0 or not done.stdout.startswith(
            REF_PACKAGE.split('==')[1] + ' '):
        log('installing %s and uwsgi into %s (pip builds uwsgi with gcc; '
            'a few minutes)' % (REF_PACKAGE, REF_VENV))
        os.makedirs(os.path.dirname(REF_VENV), exist_ok=True)
        subprocess.run(['python3.11', '-m', 'venv', REF_VENV], check=True)
        subprocess.run(pip + ['--upgrade', 'pip'], check=True)
        subprocess.run(pip + [REF_PACKAGE, 'uwsgi'], check=True)
        done = subprocess.run(probe, capture_output=True, text=True,
                              check=True)
    wanted = ['%s==%s' % (name, importlib.metadata.version(name))
              for name in REF_EXTRAS]
    have = subprocess.run(
        [py, '-c', 'import importlib.metadata as m, sys\n'
         'for w in sys.argv[1:]:\n'
         '    n, v = w.split("==")\n'
         '    try:\n'
         '        print(w if m.version(n) == v else "")\n'
         '    except m.PackageNotFoundError:\n'
         '        print("")'] + wanted,
        capture_output=True, text=True, check=True).stdout.split()
    missing = [w for w in wanted if w not in have]
    if missing:
        log('installing %s into %s' % (' '.join(missing), REF_VENV))
        subprocess.run(pip + missing, check=True)
    return done.stdout.split()


# --------------------------------------------------------------------------
# Processes


def uwsgi(name, workdir, venv, module, workers, env=None, pythonpath=None,
          pyargv=None):
    """uWSGI serving `module` from `venv` on a free loopback port; the same
    options for every app. Returns (Proc, url).
    """
    port = net.free_port()
    cmd = [os.path.join(REF_VENV, 'bin', 'uwsgi'),
           '--http-socket', '127.0.0.1:%d' % port,
           '--master', '--processes', str(workers), '--threads', '1',
           '--lazy-apps', '--die-on-term', '--thunder-lock',
           '--buffer-size', '65535', '--disable-logging',
           '--home', venv, '--module', module]
    for key, value in (env or {}).items():
        cmd += ['--env', '%s=%s' % (key, value)]
    if pythonpath:
        cmd += ['--pythonpath', pythonpath]
    if pyargv:
        cmd += ['--pyargv', pyargv]
    proc = processes.Process(name, cmd, workdir, cwd=workdir)
    url = net.url(port)
    try:
        proc.wait_for(lambda: _answers(url + '/'), 'an answer', 90)
    except BaseException:
        proc.stop()
        raise
    return proc, url


def _answers(url):
    """True once `url` answers at all (any status)."""
    import urllib.error
    import urllib.request
    try:
        urllib.request.urlopen(url, timeout=5).read()
    except urllib.error.HTTPError:
        pass  # it answers
    except OSError:
        return False
    return True


class PlacementStub:
    """GET / → a Placement version document; the reference conductor's
    SDK adapter asks for it once at start-up.
    """

    DOC = {'versions': [{
        'id': 'v1.0', 'status': 'CURRENT', 'min_version': '1.0',
        'max_version': '1.39', 'links': [{'rel': 'self', 'href': ''}]}]}

    def __init__(self):
        doc = self.DOC

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                data = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      Handler)
        self.url = 'http://127.0.0.1:%d' % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever,
                         daemon=True).start()

    def stop(self):
        self.server.shutdown()


# --------------------------------------------------------------------------
# The two stacks

ADMIN_FILTER = '''"""An admin identity on every request (the bench only)."""


def filter_factory(global_conf, **local_conf):
    def wrap(app):
        def admin(environ, start_response):
            environ.update(HTTP_X_ROLES='admin,member,reader',
                           HTTP_X_SERVICE_ROLES='service',
                           HTTP_X_PROJECT_ID=%r,
                           HTTP_X_USER_ID='cyborg-bench',
                           HTTP_X_IDENTITY_STATUS='Confirmed')
            return app(environ, start_response)
        return admin
    return wrap
'''


def configure_reference(d, db_url, stub, rabbit_url):
    """The reference's configuration in directory `d`: its cyborg.conf on
    `db_url`, its shipped paste pipeline with an admin identity in place
    of authtoken, and its schema. Returns (the cyborg.conf path, how the
    schema was made).
    """
    conf = os.path.join(d, 'cyborg.conf')
    paste = os.path.join(d, 'api-paste.ini')
    with open(conf, 'w') as f:
        f.write('[DEFAULT]\ntransport_url = %s\n'
                'control_exchange = cyborg_bench_%s\n'
                '[api]\napi_paste_config = %s\n'
                '[database]\nconnection = %s\n'
                '[placement]\nauth_type = none\nendpoint_override = %s\n'
                '[nova]\nauth_type = none\nendpoint_override = %s\n'
                % (rabbit_url, uuid.uuid4().hex[:8], paste, db_url,
                   stub.url, stub.url))
    with open(os.path.join(d, 'bench_admin_identity.py'), 'w') as f:
        f.write(ADMIN_FILTER % ADMIN_PROJECT)
    with open(os.path.join(REF_VENV, 'etc', 'cyborg', 'api-paste.ini')) as f:
        shipped = f.read()
    if ' authtoken ' not in shipped:
        raise RuntimeError('the reference paste pipeline has no authtoken')
    with open(paste, 'w') as f:
        f.write(shipped.replace(' authtoken ', ' benchadmin ')
                + '\n[filter:benchadmin]\npaste.filter_factory = '
                'bench_admin_identity:filter_factory\n')
    dbsync = os.path.join(REF_VENV, 'bin', 'cyborg-dbsync')
    done = subprocess.run([dbsync, '--config-file', conf, 'upgrade'],
                          capture_output=True, text=True)
    if done.returncode == 0:
        return conf, 'upgrade'
    backend = {'sqlite': 'SQLite', 'postgresql': 'PostgreSQL'}.get(
        db_url.split(':')[0].split('+')[0])
    if backend is None:
        raise ReferenceUnavailable(
            'its cyborg-dbsync upgrade failed on %s: %s'
            % (db_url.split(':')[0], _last_error(done)))
    if backend == 'SQLite':
        # SQLite has no ALTER COLUMN: the upgrade stopped part-way.
        os.remove(db_url[len('sqlite:///'):])
    return conf, '%s (upgrade failed on %s: %s)' % (
        _models_schema(d, conf), backend, _last_error(done))


# The reference's `cyborg-dbsync create_schema` with each Enum column
# that has no type name given one (its table's and column's names).
NAMED_ENUM_SCHEMA = '''"""The reference's schema (cyborg-bench only)."""
import sys

import sqlalchemy as sa

from cyborg.cmd import dbsync
from cyborg.db.sqlalchemy import models

for table in models.Base.metadata.tables.values():
    for column in table.columns:
        if isinstance(column.type, sa.Enum) and column.type.name is None:
            column.type.name = '%s_%s' % (table.name, column.name)
sys.argv = ['cyborg-dbsync', '--config-file', sys.argv[1], 'create_schema']
dbsync.main()
'''


def _models_schema(d, conf):
    """The reference's schema from its models, where its migrations do not
    run: its `cyborg-dbsync create_schema` (the tables from its models,
    the head revision stamped), with each Enum that has no type name given
    one (NAMED_ENUM_SCHEMA). On SQLite its upgrade stops at an ALTER
    COLUMN; on PostgreSQL at an Enum without a type name (17.0.0's
    migrations and models each declare one: a migration's device status,
    the models' ARQ state; SQLAlchemy: "PostgreSQL Enum type requires a
    name"), where its migrations run in one transaction, so nothing of
    them is left. On SQLite a name changes nothing of the tables (the
    same schema as plain create_schema); on PostgreSQL it is the one
    thing added, and the tables, columns and queries are the reference's
    own. Returns how the schema was made.
    """
    script = os.path.join(d, 'bench_reference_schema.py')
    with open(script, 'w') as f:
        f.write(NAMED_ENUM_SCHEMA)
    done = subprocess.run(
        [os.path.join(REF_VENV, 'bin', 'python'), script, conf],
        capture_output=True, text=True)
    if done.returncode != 0:
        raise ReferenceUnavailable(
            'its create_schema failed: %s' % _last_error(done))
    return 'create_schema, unnamed Enum types named'


class ReferenceUnavailable(RuntimeError):
    """The reference cannot be set up on that database; why."""


def _last_error(done):
    """The last line naming an error in a finished command's output,
    without oslo.log's prefix (time, process, level, logger).
    """
    line = ([ln for ln in done.stdout.splitlines() + done.stderr.splitlines()
             if 'Error' in ln] or ['?'])[-1]
    return _LOG_PREFIX.sub('', line)[-160:]


# oslo.log's default line start: "2026-12-06 14:09:54.665 7766 ERROR cyborg ".
_LOG_PREFIX = re.compile(
    r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \d+ [A-Z]+ \S+ ')


def reference_conductor(d, conf):
    """The reference's conductor on `conf`, in a process of its own."""
    return processes.Process(
        'ref-conductor', [os.path.join(REF_VENV, 'bin', 'cyborg-conductor'),
                          '--config-file', conf], d, cwd=d)


def start_reference(workdir, workers, stub, rabbit_url):
    """(uWSGI Proc, conductor Proc, url, db url, how the schema was made)."""
    d = os.path.join(workdir, 'ref')
    os.makedirs(d)
    db_url = 'sqlite:///%s' % os.path.join(d, 'cyborg.sqlite')
    conf, schema = configure_reference(d, db_url, stub, rabbit_url)
    conductor = reference_conductor(d, conf)
    api, url = uwsgi('ref-uwsgi', d, REF_VENV,
                     'cyborg.wsgi.api:application', workers, pythonpath=d,
                     pyargv='--config-file ' + conf)
    wait_conductor(url, conductor)
    return api, conductor, url, db_url, schema


def wait_conductor(url, conductor, timeout=60):
    """Until a profile create (an RPC call to the conductor) succeeds."""
    import urllib.request
    deadline = time.monotonic() + timeout
    body = json.dumps([{'name': 'cyborg-bench-probe',
                        'groups': FPGA_GROUPS}]).encode()
    while time.monotonic() < deadline:
        if not conductor.alive():
            raise RuntimeError('conductor exited:\n'
                               + conductor.log_tail(60))
        req = urllib.request.Request(
            url + '/v2/device_profiles', data=body, method='POST',
            headers={'Content-Type': 'application/json'})
        try:
            urllib.request.urlopen(req, timeout=10).read()
        except OSError:
            time.sleep(1)
            continue
        req = urllib.request.Request(
            url + '/v2/device_profiles/cyborg-bench-probe', method='DELETE')
        urllib.request.urlopen(req, timeout=10).read()
        return
    raise RuntimeError('the reference conductor never answered:\n'
                       + conductor.log_tail(60))


def start_ours(workdir, workers, module='cyborg.wsgi.api:application',
               env=None, pythonpath=None):
    """Our API (`module`) under uWSGI on a new SQLite file: (Proc, url,
    database URL). `pythonpath`: a directory whose `cyborg` package is
    served (and makes the schema) instead of the installed one.
    """
    d = os.path.join(workdir, 'ours')
    os.makedirs(d)
    db_url = 'sqlite:///%s' % os.path.join(d, 'cyborg.sqlite')
    conf = os.path.join(d, 'cyborg.conf')
    with open(conf, 'w') as f:
        f.write('[api]\nauth_strategy = noauth\n'
                '[database]\nconnection = %s\n' % db_url)
    manage_env = None
    if pythonpath:
        manage_env = dict(os.environ, PYTHONPATH=pythonpath)
    subprocess.run([os.path.join(OUR_VENV, 'bin', 'cyborg-manage'),
                    '--config-file', conf, 'db', 'sync'],
                   check=True, capture_output=True, env=manage_env)
    api, url = uwsgi('ours-uwsgi', d, OUR_VENV, module, workers,
                     env=dict(env or {}, CYBORG_CONFIG_FILE=conf),
                     pythonpath=pythonpath)
    return api, url, db_url


# --------------------------------------------------------------------------
# Running cyborg-bench


def bench(name, url, workdir, workloads, args, extra=()):
    """cyborg-bench in a subprocess; its JSON document."""
    out = os.path.join(workdir, name + '.json')
    cmd = BENCH + ['--url', url, '--label', name, '--json', out,
                   '--workloads', ','.join(workloads)] + list(extra)
    log('%s: cyborg-bench %s' % (name, ' '.join(cmd[3:])))
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE,
                          stderr=sys.stderr, text=True,
                          timeout=args.bench_timeout)
    print('\n### %s\n\n%s' % (name, done.stdout), flush=True)
    with open(out) as f:
        return json.load(f)


def common_args(p, time_limit, sizes):
    return ['--requests', str(p['requests']), '--time-limit',
            str(time_limit), '--sizes', ','.join(map(str, sizes)),
            '--request-timeout', '600']


class Started:
    """What one side-by-side (or per-db) run starts: the uWSGI servers,
    the reference's conductor and RabbitMQ vhost, the Placement stub; all
    stopped when the run ends, however it ends.
    """

    def __init__(self):
        self.procs = []
        self.vhost = None
        self.stub = None

    def __enter__(self):
        self.stub = PlacementStub()
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            proc.stop()
        self.stub.stop()
        if self.vhost is not None:
            self.vhost.delete()

    def floor(self, args, workdir):
        """The no-op app under the same uWSGI: (Proc, url)."""
        floor, url = uwsgi('floor-uwsgi', workdir, OUR_VENV,
                           'cyborg.wsgi.floor:application', args.workers)
        self.procs.append(floor)
        return floor, url

    def ours(self, args, workdir):
        api, url, db_url = start_ours(workdir, args.workers)
        self.procs.append(api)
        return api, url, db_url

    def rabbit_url(self):
        """The transport URL of the run's RabbitMQ vhost (made once)."""
        if self.vhost is None:
            self.vhost = rabbit.VirtualHost(prefix='cyborg-bench')
        return self.vhost.url

    def reference(self, args, workdir):
        api, conductor, url, db_url, schema = start_reference(
            workdir, args.workers, self.stub, self.rabbit_url())
        self.procs += [api, conductor]
        return api, conductor, url, db_url, schema


def _bench_floor(name, args, p, workdir, url, compared):
    """The floor's GET / and, when the list is compared, its answer of
    the list's size (cyborg.wsgi.floor).
    """
    return bench(name, url, workdir,
                 ['noop'] + ([LIST_FLOOR] if LIST_FLOOR in compared else []),
                 args, common_args(p, p['time_limit'], p['sizes']))


def _bench_ours(name, args, p, workdir, url, db_url, compared):
    """Ours at one client, the compared workloads."""
    return bench(name, url, workdir, compared, args,
                 common_args(p, p['time_limit'], p['sizes'])
                 + ['--seed-db', db_url])


def _bench_reference(name, args, p, workdir, url, db_url, schema,
                     compared):
    """The reference's one-client run of the compared workloads (and
    bind, reported as not run: see NO_BIND); tables up to 10,000 rows.
    """
    small = [s for s in p['sizes'] if s <= 10000]
    doc = bench(name, url, workdir,
                compared + (['bind'] if args.aio else []), args,
                common_args(p, p['ref_time_limit'], small)
                + ['--seed-db', db_url, '--no-bind-reason', NO_BIND])
    doc['meta']['schema'] = schema
    return doc


def _reference_large(args, p, workdir, url, db_url, compared):
    """The reference's lookups in tables over 10,000 rows: seconds to
    minutes per request here, so one lookup per size, bounded by
    --ref-request-timeout, after everything else (an abandoned request
    would hold a worker). Their result rows.
    """
    results = []
    small = [s for s in p['sizes'] if s <= 10000]
    for size in (p['sizes'][len(small):] if 'lookup' in compared else []):
        big = bench('reference-%d' % size, url, workdir, ['lookup'], args,
                    ['--requests', '1', '--warmup', '0', '--sizes',
                     str(size), '--request-timeout',
                     str(args.ref_request_timeout), '--seed-db', db_url])
        for r in big['results']:
            r['timeout_s'] = args.ref_request_timeout
        results += big['results']
    return results


def _ours_concurrency(args, p, workdir, url, db_url, compared):
    """Ours with more than one client (the reference is not run so)."""
    return bench(
        'ours-concurrency', url, workdir,
        [w for w in ('dp-create', 'dp-get', 'dp-list', 'arq-create',
                     'lookup', 'boot') if w in compared], args,
        common_args(p, p['time_limit'], p['sizes'][:1])
        + ['--seed-db', db_url, '--concurrency',
           ','.join(map(str, p['concurrency'][1:]))])


def run_all(args, p, workdir):
    runs = {}
    with Started() as started:
        compared = _compared(args)
        floor, floor_url = started.floor(args, workdir)
        runs['floor'] = _bench_floor('floor', args, p, workdir, floor_url,
                                     compared)
        floor.stop()
        runs['storage'] = storage_costs(workdir)

        api, url, db_url = started.ours(args, workdir)
        runs['ours'] = _bench_ours('ours', args, p, workdir, url, db_url,
                                   compared)
        runs['ours-concurrency'] = _ours_concurrency(
            args, p, workdir, url, db_url, compared)
        api.stop()

        if not args.skip_reference:
            api, conductor, url, db_url, schema = started.reference(
                args, workdir)
            runs['reference'] = _bench_reference(
                'reference', args, p, workdir, url, db_url, schema, compared)
            runs['reference']['results'] += _reference_large(
                args, p, workdir, url, db_url, compared)
            api.stop()
            conductor.stop()

        if args.aio:
            runs['ours-aio'] = bench_aio(args, p, workdir)
    return runs


def run_rounds(args, p, workdir):
    """--rounds N: the floor, ours and the reference all up at once, the
    one-client workloads measured N times with requests/N operations,
    alternating which side goes first; per round the floor and the
    storage costs just before. Then the reference's big lookups and ours
    under concurrency, once.
    """
    n = args.rounds
    per_round = dict(p, requests=max(1, p['requests'] // n))
    runs = {'rounds': []}
    with Started() as started:
        floor, floor_url = started.floor(args, workdir)
        compared = _compared(args)
        api, url, db_url = started.ours(args, workdir)
        sides = {'ours': lambda name: _bench_ours(
            name, args, per_round, workdir, url, db_url, compared)}
        if not args.skip_reference:
            ref_api, conductor, ref_url, ref_db, schema = started.reference(
                args, workdir)

            def reference(name):
                return _bench_reference(name, args, per_round, workdir,
                                        ref_url, ref_db, schema, compared)
            sides['reference'] = reference

        for i in range(1, n + 1):
            # Odd rounds ours first, even ones the reference: a drift
            # during a round favours each side equally often.
            order = [s for s in (('ours', 'reference') if i % 2 else
                                 ('reference', 'ours')) if s in sides]
            log('round %d of %d: %s' % (i, n, ' then '.join(order)))
            rnd = {'round': i, 'order': order}
            d = os.path.join(workdir, 'round-%d' % i)
            os.makedirs(d)
            rnd['floor'] = _bench_floor('floor-r%d' % i, args, per_round,
                                        workdir, floor_url, compared)
            rnd['storage'] = storage_costs(d)
            for side in order:
                rnd[side] = sides[side]('%s-r%d' % (side, i))
            runs['rounds'].append(rnd)
        floor.stop()

        if 'reference' in sides:
            # Once, after the rounds; every round is compared with it.
            large = _reference_large(args, p, workdir, ref_url, ref_db,
                                     compared)
            if large:
                runs['reference-large'] = {'results': large}
            ref_api.stop()
            conductor.stop()

        runs['ours-concurrency'] = _ours_concurrency(
            args, p, workdir, url, db_url, compared)
        api.stop()

        if args.aio:
            runs['ours-aio'] = bench_aio(args, p, workdir)
    return runs


def round_rows(runs):
    """--rounds: the merged rows (medians, each round's figures in its
    'rounds'), then bind and boot on cyborg-aio.
    """
    per_round = []
    for rnd in runs['rounds']:
        one = {k: rnd[k] for k in ('floor', 'storage', 'ours') if k in rnd}
        if 'reference' in rnd:
            one['reference'] = dict(rnd['reference'], results=(
                rnd['reference']['results']
                + runs.get('reference-large', {}).get('results', [])))
        per_round.append(one_client_rows(one))
    orders = [rnd['order'] for rnd in runs['rounds']]
    return rounds.merge(per_round, orders) + aio_rows(runs)


def round_figures(runs):
    """(median floor, median storage costs, each round's first side,
    floor p50 and commit p50) of --rounds runs.
    """
    floors = [floor_figures(rnd['floor']) or {} for rnd in runs['rounds']]
    floor = {k: round(v, 3) for k, v in rounds.median_of(
        floors, ('ops_per_s', 'p50_ms', 'p99_ms', 'list_p50_ms')).items()}
    storages = [rnd['storage'] for rnd in runs['rounds']]
    storage = dict(storages[0], **{
        k: round(v, 4) for k, v in rounds.median_of(
            storages, ('commit_ms', 'read_ms', 'list_read_ms')).items()})
    each = [{'first': rnd['order'][0], 'floor_p50_ms': f.get('p50_ms'),
             'commit_ms': rnd['storage']['commit_ms']}
            for rnd, f in zip(runs['rounds'], floors)]
    return (floor if 'ops_per_s' in floor else None), storage, each


def _documents(runs):
    """Every cyborg-bench load document in `runs`."""
    for key, doc in runs.items():
        if key == 'rounds':
            for rnd in doc:
                yield from (rnd[side] for side in ('floor', 'ours',
                                                   'reference')
                            if side in rnd)
        else:
            yield doc


# The limit of each workload at one client: the no-op app's request (on
# the same server) per request, plus one durable commit per write, one
# indexed read per read, and for the list one indexed read of the rows it
# lists: (requests, commits, reads, list reads).
LIMIT_OF = {'noop': (1, 0, 0, 0), 'dp-create': (1, 1, 0, 0),
            'dp-get': (1, 0, 1, 0), 'dp-delete': (1, 1, 0, 0),
            'dp-list': (1, 0, 0, 1), 'arq-create': (1, 1, 0, 0),
            'boot': (3, 2, 1, 0)}
# The workload whose floor request is the no-op app answering as many
# bytes (cyborg.wsgi.floor's list, measured with this same workload), since
# moving and decoding its 76 KB answer costs the client about 0.8 ms more
# than `{}` before the server does anything. Every other workload's floor
# request is the floor's noop (GET / → {}).
LIST_FLOOR = 'dp-list'


def floor_figures(doc):
    """The floor's noop row (ops_per_s, p50_ms, p99_ms) of a floor run,
    with list_p50_ms, the p50 of its list, when it was measured; None
    when the noop was not.
    """
    found = _index(doc)
    noop = found.get(('noop', None, 1))
    if noop is None:
        return None
    out = dict(noop)
    row = next((r for k, r in found.items()
                if k[0] == LIST_FLOOR and k[2] == 1), None)
    if row and row.get('p50_ms'):
        out['list_p50_ms'] = row['p50_ms']
    return out


def limit_ms(workload, floor, storage):
    """The limit p50 of `workload` from the floor's figures (p50_ms, and
    list_p50_ms for the list: floor_figures()) and the storage costs
    (commit_ms, read_ms, list_read_ms); None when it has none (or the
    floor of its size was not measured).
    """
    parts = LIMIT_OF.get(workload)
    if not parts:
        return None
    floor_ms = floor.get('list_p50_ms' if workload == LIST_FLOOR
                         else 'p50_ms')
    if not floor_ms:
        return None
    return (parts[0] * floor_ms + parts[1] * storage['commit_ms']
            + parts[2] * storage['read_ms']
            + parts[3] * storage['list_read_ms'])


def storage_costs(workdir, commits=300, reads=2000, list_reads=500):
    """p50 ms of one durable commit (INSERT + COMMIT, SQLite WAL with its
    default synchronous=FULL, BEGIN IMMEDIATE as our writers), of one
    read by primary key and of one read of the rows dp-list lists, on a
    SQLite file in `workdir`, with the driver alone.
    """
    import sqlite3
    path = os.path.join(workdir, 'limit.sqlite')
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute('PRAGMA journal_mode=WAL')
    conn.execute('CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)')
    keys = []

    def commit(i):
        key = uuid.uuid4().hex
        conn.execute('BEGIN IMMEDIATE')
        conn.execute('INSERT INTO t VALUES (?, ?)', (key, 'x' * 200))
        conn.execute('COMMIT')
        keys.append(key)

    def read(i):
        conn.execute('BEGIN')
        conn.execute('SELECT v FROM t WHERE k = ?',
                     (keys[i % len(keys)],)).fetchall()
        conn.execute('COMMIT')

    def list_read(i):
        conn.execute('BEGIN')
        conn.execute(profile.LIST_SELECT).fetchall()
        conn.execute('COMMIT')

    conn.execute(profile.LIST_TABLE)
    conn.execute('BEGIN')
    conn.executemany(profile.LIST_INSERT.replace('%s', '?'),
                     profile.list_rows())
    conn.execute('COMMIT')
    try:
        return {'commit_ms': p50_ms(commit, commits),
                'read_ms': p50_ms(read, reads),
                'list_read_ms': p50_ms(list_read, list_reads),
                'list_rows': profile.LIST_ROWS,
                'synchronous': 'FULL (SQLite default)', 'journal_mode': 'WAL'}
    finally:
        conn.close()


def p50_ms(op, n, warmup=0):
    """p50 ms of n calls of op(i), after `warmup` untimed ones."""
    for i in range(warmup):
        op(i)
    times = []
    for i in range(warmup, warmup + n):
        started = time.perf_counter()
        op(i)
        times.append(1000 * (time.perf_counter() - started))
    times.sort()
    return round(times[len(times) // 2], 4)


def _compared(args):
    if not args.workloads:
        return list(COMPARED)
    names = [w for w in args.workloads.split(',') if w]
    unknown = sorted(set(names) - set(COMPARED))
    if unknown:
        raise SystemExit('unknown workloads %s (of %s)'
                         % (', '.join(unknown), ', '.join(COMPARED)))
    if 'dp-get' in names or 'dp-delete' in names:
        # They use the profiles dp-create made.
        names = ['dp-create'] + [w for w in names if w != 'dp-create']
    return [w for w in COMPARED if w in names]


def bench_aio(args, p, workdir):
    """Bind and boot with bind on cyborg-aio (fake FPGA host, 16 cards x
    8 functions = 128 attach handles), its [nova] at the bench's receiver.
    """
    d = os.path.join(workdir, 'aio')
    os.makedirs(d)
    spec = os.path.join(d, 'host.yaml')
    hostspec.write_fpgas(spec, 16, 8)
    port = net.free_port()
    aio = harness_aio.Aio(d, host_spec=spec, nova_endpoint=net.url(port))
    try:
        url = 'http://127.0.0.1:%d%s' % (aio.port, aio.prefix)
        return bench('ours-aio', url, workdir, ['bind', 'boot'], args,
                     ['--requests', str(p['bind_requests']),
                      '--time-limit', str(p['time_limit']),
                      '--receiver-port', str(port),
                      '--groups', json.dumps(FPGA_GROUPS),
                      '--concurrency', ','.join(map(str, p['concurrency']))])
    finally:
        aio.stop()


# --------------------------------------------------------------------------
# The table


def _key(r):
    return (r['workload'], r.get('rows'), r.get('concurrency'))


def _index(doc):
    return {_key(r): r for r in doc['results'] if 'not_run' not in r}


def compare(mine_doc, ref_doc, floor=None):
    """Rows pairing each of our one-client results with the reference's
    (same workload, rows, concurrency); ratio = ours / reference.
    """
    ours = _index(mine_doc)
    ref = _index(ref_doc) if ref_doc else {}
    ref_not_run = {r['workload']: r['not_run']
                   for r in (ref_doc or {}).get('results', [])
                   if 'not_run' in r}
    rows = []
    for key, mine in ours.items():
        if key[2] != 1:
            continue
        theirs = ref.get(key)
        row = {'workload': key[0], 'rows': key[1],
               'ours_ops_per_s': mine['ops_per_s'],
               'ours_p50_ms': mine.get('p50_ms'),
               'ours_p99_ms': mine.get('p99_ms'),
               'ours_errors': mine['errors']}
        if 'listed' in mine:
            row['ours_listed'] = mine['listed']
        if theirs and not theirs['ok'] and theirs.get('timeout_s'):
            # Not one request finished within the bound: a lower bound.
            row.update(ref_timed_out_s=theirs['timeout_s'],
                       ratio_at_least=round(mine['ops_per_s']
                                            * theirs['timeout_s']),
                       p50_ratio_at_least=round(
                           theirs['timeout_s'] * 1000 / mine['p50_ms']))
        elif theirs:
            row.update(ref_ops_per_s=theirs['ops_per_s'],
                       ref_p50_ms=theirs.get('p50_ms'),
                       ref_p99_ms=theirs.get('p99_ms'),
                       ref_ok=theirs['ok'], ref_errors=theirs['errors'],
                       ref_time_capped=theirs['time_capped'])
            if 'listed' in theirs:
                row['ref_listed'] = theirs['listed']
            if theirs['ops_per_s']:
                row['ratio'] = float('%.3g' % (mine['ops_per_s']
                                               / theirs['ops_per_s']))
            if theirs.get('p50_ms') and mine.get('p50_ms'):
                row['p50_ratio'] = float('%.3g' % (theirs['p50_ms']
                                                   / mine['p50_ms']))
        else:
            row['ref_not_run'] = ref_not_run.get(
                key[0], 'not measured (minutes per request at this size)')
        if floor and floor['ops_per_s']:
            row['share_of_floor'] = round(mine['ops_per_s']
                                          / floor['ops_per_s'], 3)
        rows.append(row)
    return rows


def ratios(runs):
    """The side-by-side rows: one client, ours vs reference, plus bind and
    the bound boot flow on cyborg-aio (the reference: not run).
    """
    return one_client_rows(runs) + aio_rows(runs)


def one_client_rows(runs):
    """compare() of runs' ours and reference, each row with its limit
    from runs' floor and storage costs.
    """
    floor = floor_figures(runs['floor'])
    rows = compare(runs['ours'], runs.get('reference'), floor)
    storage = runs.get('storage')
    for row in rows:
        limit = limit_ms(row['workload'], floor, storage) \
            if storage and floor else None
        if limit and row.get('ours_p50_ms'):
            row['limit_p50_ms'] = round(limit, 3)
            row['p50_over_limit'] = round(row['ours_p50_ms'] / limit, 2)
        if limit and row.get('ref_p50_ms'):
            # The p50 ratio of a server that answered at the limit: the
            # most any implementation could show against this reference
            # on this machine and client (no server is faster than the
            # no-op app).
            row['p50_ratio_at_limit'] = float(
                '%.3g' % (row['ref_p50_ms'] / limit))
    return rows


def aio_rows(runs):
    """Bind and the bound boot flow on cyborg-aio (ours only)."""
    ref_not_run = {r['workload']: r['not_run']
                   for r in _reference_results(runs) if 'not_run' in r}
    aio = _index(runs['ours-aio']) if 'ours-aio' in runs else {}
    rows = []
    for name in ('bind', 'boot'):
        mine = aio.get((name, None, 1))
        if mine:
            rows.append({
                'workload': name + ' (bound, cyborg-aio)', 'rows': None,
                'ours_ops_per_s': mine['ops_per_s'],
                'ours_p50_ms': mine.get('p50_ms'),
                'ours_p99_ms': mine.get('p99_ms'),
                'ours_errors': mine['errors'],
                'ref_not_run': ref_not_run.get('bind', 'not run')})
    return rows


def _reference_results(runs):
    if 'rounds' in runs:
        return [r for rnd in runs['rounds']
                for r in rnd.get('reference', {}).get('results', [])]
    return runs.get('reference', {}).get('results', [])


def markdown(rows, floor=None, storage=None):
    lines = ['| workload | rows | ours op/s | ours p50 ms | ours p99 ms '
             '| reference op/s | reference p50 ms | reference p99 ms '
             '| ratio (op/s) | ratio (p50) | of floor | limit p50 ms '
             '| ours p50 / limit | ratio (p50) at the limit |',
             '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:'
             '|---:|---:|']
    for r in rows:
        ratio = '%s×' % stats.num(r['ratio']) if 'ratio' in r else '–'
        p50_ratio = ('%s×' % stats.num(r['p50_ratio']) if 'p50_ratio' in r
                     else '–')
        if 'ref_ops_per_s' in r:
            ref = '%s | %s | %s' % (stats.num(r['ref_ops_per_s']),
                                    r['ref_p50_ms'], r['ref_p99_ms'])
            if r['ref_time_capped']:
                ref += ' (%d done, time cap)' % r['ref_ok']
        elif 'ref_timed_out_s' in r:
            ref = '< %.3f | > %d s | (none finished)' % (
                1.0 / r['ref_timed_out_s'], r['ref_timed_out_s'])
            ratio = '> %s×' % r['ratio_at_least']
            p50_ratio = '> %s×' % r['p50_ratio_at_least']
        else:
            ref = 'not run | | '
        name = r['workload']
        if 'ours_listed' in r:
            name += ' (lists %s%s)' % (
                r['ours_listed'], ' vs %s' % r['ref_listed']
                if 'ref_listed' in r else '')
        lines.append(
            '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s '
            '| %s |' % (
                name, '{:,}'.format(r['rows']) if r['rows'] else '',
                stats.num(r['ours_ops_per_s']), r['ours_p50_ms'],
                r['ours_p99_ms'],
                ref, ratio, p50_ratio,
                '%.0f%%' % (100 * r['share_of_floor'])
                if 'share_of_floor' in r else '',
                r.get('limit_p50_ms', ''),
                '%.2f×' % r['p50_over_limit'] if 'p50_over_limit' in r
                else '',
                '%s×' % stats.num(r['p50_ratio_at_limit'])
                if 'p50_ratio_at_limit' in r else ''))
    if floor:
        lines.append('\nFloor (no-op app, same uWSGI): %.1f req/s, p50 %s '
                     'ms, p99 %s ms' % (floor['ops_per_s'], floor['p50_ms'],
                                        floor['p99_ms'])
                     + ('; its answer of the list\'s size (dp-list): p50 %s '
                        'ms' % floor['list_p50_ms']
                        if floor.get('list_p50_ms') else ''))
    if storage:
        lines.append('One durable commit (SQLite WAL, synchronous=FULL): p50 '
                     '%s ms; one read by primary key: p50 %s ms; one read of '
                     'the %d rows dp-list lists: p50 %s ms'
                     % (storage['commit_ms'], storage['read_ms'],
                        storage['list_rows'], storage['list_read_ms']))
    return '\n'.join(lines)


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError('%s: must be 1 or more' % text)
    return value


def add_arguments(parser):
    parser.add_argument('--quick', action='store_true',
                        help='small counts and tables (a smoke run)')
    parser.add_argument('--workers', type=int, default=2,
                        help='uWSGI processes per app (default 2)')
    parser.add_argument('--skip-reference', action='store_true',
                        help='ours and the floor only')
    parser.add_argument('--bench-timeout', type=float, default=1800,
                        help='hard bound on one cyborg-bench run (s)')
    parser.add_argument('--ref-request-timeout', type=int, default=240,
                        help='bound on one reference lookup above 10k ARQs '
                             '(s; default 240)')
    parser.add_argument('--workloads', metavar='LIST',
                        help='comma-separated subset of %s (default: all)'
                             % ','.join(COMPARED))
    parser.add_argument('--no-aio', dest='aio', action='store_false',
                        help='skip bind and the bound boot flow '
                             '(cyborg-aio)')
    parser.add_argument('--rounds', type=positive, default=1,
                        metavar='N',
                        help='N interleaved rounds: both servers up at '
                             'once, the one-client workloads measured N '
                             'times with requests/N operations each, the '
                             'side that goes first alternating; the table '
                             'shows medians (default 1: one run of each, '
                             'one after the other)')
    parser.add_argument('--requests', type=positive, metavar='N',
                        help='operations per one-client workload and side, '
                             'split over the rounds (default %d; %d with '
                             '--quick)' % (PROFILES['full']['requests'],
                                           PROFILES['quick']['requests']))
    parser.add_argument('--json', metavar='FILE')
    parser.add_argument('--keep', action='store_true',
                        help='keep the temp dir (logs, databases)')


def profile_of(args):
    """The counts of a run: --quick's or the full ones, with --requests
    in place of the profile's requests per workload and side.
    """
    p = PROFILES['quick' if args.quick else 'full']
    if args.requests:
        p = dict(p, requests=args.requests)
    return p


def run(args):
    p = profile_of(args)

    started = time.perf_counter()
    versions = None if args.skip_reference else ensure_ref_venv()
    workdir = tempfile.mkdtemp(prefix='cyborg-side-by-side-')
    meta = machine.describe()
    meta.update({
        'mode': 'quick' if args.quick else 'full', 'profile': p,
        'workers': args.workers,
        'reference': versions and {'openstack-cyborg': versions[0],
                                   'uwsgi': versions[1]},
    })
    if args.rounds > 1:
        meta.update(rounds=args.rounds,
                    requests_per_round=max(1, p['requests'] // args.rounds))
    try:
        runs = (run_rounds if args.rounds > 1 else run_all)(args, p, workdir)
    finally:
        if args.keep:
            log('kept %s' % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    meta['loadavg_end'] = machine.loadavg()
    meta['seconds'] = round(time.perf_counter() - started, 1)
    if args.rounds > 1:
        rows = round_rows(runs)
        floor, storage, each = round_figures(runs)
        print('\n## Side by side (one client; median of %d rounds; ratio = '
              'ours / reference)\n' % args.rounds)
        print(markdown(rows, floor, storage))
        print('\n### Each round\n')
        print(rounds.table(rows, each))
    else:
        rows = ratios(runs)
        floor = floor_figures(runs['floor'])
        print('\n## Side by side (one client; ratio = ours / reference)\n')
        print(markdown(rows, floor, runs.get('storage')))

    print('\nload average %s → %s; %.0f s in all'
          % (meta['loadavg_start'][0], meta['loadavg_end'][0],
             meta['seconds']))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'meta': meta, 'side_by_side': rows, 'runs': runs},
                      f, indent=2)
    # Wrong answers; a reference lookup that ran past its bound is not one.
    failed = sum(r.get('errors', 0) for doc in _documents(runs)
                 for r in doc.get('results', []) if not r.get('timeout_s'))
    return 1 if failed else 0
