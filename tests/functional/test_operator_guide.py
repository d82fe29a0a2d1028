# SPDX-License-Identifier: Apache-2.0
"""docs/operator-guide.md "Distributed mode, step by step", followed in
order on MariaDB and RabbitMQ.

The fenced blocks the guide marks `<!-- guide: NAME -->` are read from the
guide and run as written, with only the lab's host names, ports, paths and
database/user/vhost names replaced by this test's own (a throw-away
database pair and users on the MariaDB at 127.0.0.1:3306, a vhost and user
of its own on the RabbitMQ at 127.0.0.1:5672, managed with rabbitmqctl), so
the guide and the test cannot drift apart. Services run as processes from
a fresh virtualenv where a wheel of this checkout was installed with the
guide's first block, `pip install 'cyborg-gpu[mysql]'` (from the wheel's
folder, the dependencies borrowed from the test virtualenv: see
tests/installed.py), and from a directory outside the checkout. The
PostgreSQL variant of step 2 is run on its own, as far as
`cyborg-manage db sync` with the guide's PostgreSQL URL.

Needs MariaDB (root, no password) and rabbitmqctl rights on the local
RabbitMQ (and PostgreSQL, trust auth, for the PostgreSQL case); each case
is skipped without them unless CYBORG_TEST_REQUIRE_DBS=1.
"""

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import time
import uuid

import pytest
import requests
import sqlalchemy as sa

from cyborg.db import migration
from cyborg_harness import net
from cyborg_harness import processes
from tests import dbs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
GUIDE = os.path.join(ROOT, 'docs', 'operator-guide.md')
MARIADB = 'mysql+pymysql://root@127.0.0.1:3306/'
BLOCK = re.compile(r'^<!-- guide: (\S+) -->\n```(\w*)\n(.*?)^```$',
                   re.M | re.S)
# The long-running commands of the guide, and what says each is up.
SERVICES = ('cyborg-conductor', 'cyborg-agent', 'cyborg-api', 'gunicorn')
TIMEOUT = 120


def guide_blocks():
    with open(GUIDE) as f:
        text = f.read()
    return {name: body for name, _lang, body in BLOCK.findall(text)}


def commands(body):
    """(env, argv) per command line of a sh block."""
    out = []
    for line in body.replace('\\\n', ' ').splitlines():
        if not line.strip() or line.lstrip().startswith('#'):
            continue
        words = shlex.split(line)
        env = {}
        while '=' in words[0] and not words[0].startswith('-'):
            key, _, value = words.pop(0).partition('=')
            env[key] = value
        out.append((env, words))
    return out


def test_guide_has_every_block_and_the_real_names():
    blocks = guide_blocks()
    assert list(blocks) == ['install', 'mariadb', 'postgresql', 'rabbitmq',
                            'placement.conf', 'placement', 'cyborg.conf',
                            'start', 'smoke']
    # The extras it names are ours.
    setup = configparser.ConfigParser()
    setup.read(os.path.join(ROOT, 'setup.cfg'))
    extras = setup['options.extras_require']
    assert "'cyborg-gpu[mysql]'" in blocks['install']
    assert 'PyMySQL' in extras['mysql']
    assert 'psycopg2' in extras['postgresql']
    assert 'CREATE DATABASE cyborg' in blocks['postgresql']
    # The revision names it gives are the ones `db version` prints.
    with open(GUIDE) as f:
        text = ' '.join(f.read().split())
    head = migration.head()
    assert 'prints `%s`' % head in text
    assert 'Database at revision %s' % head in text


class Lab:
    """The guide's lab on this machine: names and ports of our own."""

    def __init__(self, tmp_path, installed=None):
        """installed: the tests.installed.Venv whose commands run (else
        the test virtualenv's).
        """
        self.installed = installed
        tag = uuid.uuid4().hex[:8]
        self.dir = str(tmp_path)
        self.db = {'cyborg': 'cyborg_og_%s' % tag,
                   'placement': 'placement_og_%s' % tag}
        self.node = 'og-%s' % tag
        self.ports = {name: net.free_port()
                      for name in ('api', 'placement', 'nova')}
        self.api = 'http://127.0.0.1:%d/v2' % self.ports['api']
        os.makedirs(os.path.join(self.dir, 'placement'))
        self.paths = {
            '/etc/cyborg/cyborg.conf': os.path.join(self.dir, 'cyborg.conf'),
            '/etc/placement': os.path.join(self.dir, 'placement'),
        }
        self.procs = []
        self.undo = []

    def names(self, text):
        """The database, user and vhost names of a SQL, rabbitmqctl or
        ini block (not section names, nor words such as cyborg-aio).
        """
        for name, ours in self.db.items():
            text = re.sub(r'(?<![\[\w-])%s(?![\]\w-])' % name, ours, text)
        return text

    def places(self, text):
        """Host names, ports and paths."""
        pairs = [
            ('placement-1:8778', '127.0.0.1:%d' % self.ports['placement']),
            ('0.0.0.0:8778', '127.0.0.1:%d' % self.ports['placement']),
            ('cyborg-1:6666', '127.0.0.1:%d' % self.ports['api']),
            ('cyborg-1:8774', '127.0.0.1:%d' % self.ports['nova']),
            ('0.0.0.0:8774', '127.0.0.1:%d' % self.ports['nova']),
            ('port = 6666', 'port = %d' % self.ports['api']),
            ('host_ip = 0.0.0.0', 'host_ip = 127.0.0.1'),
            ('rabbit-1', '127.0.0.1'),
            ('db-1', '127.0.0.1'),
            ('compute-1', self.node),
        ] + list(self.paths.items())
        for lab, ours in pairs:
            text = text.replace(lab, ours)
        return text

    def script(self, name):
        if self.installed is None:
            return processes.script(name) or name
        if name in ('curl',):
            return shutil.which(name)
        return self.installed.script(name)

    def env(self, env):
        base = self.installed.env() if self.installed else os.environ
        return dict(base, **env)

    def run(self, env, argv):
        """A command that ends: its stdout; it must exit 0."""
        argv = [self.script(argv[0])] + argv[1:]
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=TIMEOUT,
            env=self.env(env), cwd=self.dir)
        assert result.returncode == 0, (
            '%s exited %d:\n%s\n%s' % (' '.join(argv), result.returncode,
                                       result.stdout, result.stderr[-3000:]))
        return result.stdout

    def start(self, env, argv):
        """A service, in the background, waited for until it is up."""
        name = argv[0]
        proc = processes.Process(
            '%s-%d' % (name, len(self.procs)),
            [self.script(name)] + argv[1:], self.dir, env=self.env(env),
            cwd=self.dir)
        self.procs.append(proc)
        if name == 'gunicorn':
            proc.wait_for(lambda: _answers(
                'http://127.0.0.1:%d/' % self.ports['placement']),
                'Placement answer', TIMEOUT)
        elif name == 'cyborg-api':
            proc.wait_for(lambda: _answers(self.api), 'API answer', TIMEOUT)
        else:
            # "cyborg-conductor started", "cyborg-agent started"
            proc.wait_for(lambda: '%s started' % name in proc.logs(),
                          'start', TIMEOUT)

    def close(self):
        processes.stop_all(self.procs)
        for undo in reversed(self.undo):
            undo()


def _answers(url):
    try:
        return requests.get(url, timeout=2,
                            headers={'X-Auth-Token': 'admin'}).ok
    except requests.RequestException:
        return False


def _server(url, name):
    """An AUTOCOMMIT engine on a database server, or skip (fail under
    CYBORG_TEST_REQUIRE_DBS=1) when it does not answer.
    """
    engine = sa.create_engine(url, isolation_level='AUTOCOMMIT')
    try:
        with engine.connect():
            pass
    except Exception as e:
        engine.dispose()
        if dbs.required():
            pytest.fail('%s not reachable: %s' % (name, e))
        pytest.skip('%s not reachable: %s' % (name, e))
    return engine


@pytest.fixture
def mariadb():
    engine = _server(MARIADB, 'MariaDB')
    yield engine
    engine.dispose()


@pytest.fixture
def rabbitmqctl():
    path = shutil.which('rabbitmqctl')
    ok = path is not None and subprocess.run(
        [path, 'list_vhosts'], capture_output=True, timeout=60
    ).returncode == 0
    if not ok:
        if dbs.required():
            pytest.fail('rabbitmqctl cannot manage the local RabbitMQ')
        pytest.skip('rabbitmqctl cannot manage the local RabbitMQ')
    return path


@pytest.fixture
def lab(tmp_path, mariadb, rabbitmqctl, installed):
    lab = Lab(tmp_path, installed)
    lab.mariadb, lab.rabbitmqctl = mariadb, rabbitmqctl
    yield lab
    lab.close()


def _drop_mariadb(engine, names):
    with engine.connect() as conn:
        for name in names:
            conn.execute(sa.text('DROP DATABASE IF EXISTS %s' % name))
            conn.execute(sa.text("DROP USER IF EXISTS '%s'@'%%'" % name))


def _drop_rabbitmq(rabbitmqctl, name):
    for what in ('delete_vhost', 'delete_user'):
        subprocess.run([rabbitmqctl, what, name], capture_output=True,
                       timeout=60)


def test_follow_the_guide(lab):
    blocks = guide_blocks()

    # 1. Installed as the guide says (the `installed` fixture ran it).
    [(env, argv)] = commands(blocks['install'])
    assert (env, argv) == ({}, ['pip', 'install', lab.installed.requirement])

    # 2. Database and RabbitMQ, as root / with rabbitmqctl.
    lab.undo.append(lambda: _drop_mariadb(lab.mariadb, lab.db.values()))
    with lab.mariadb.connect() as conn:
        for statement in lab.names(blocks['mariadb']).split(';'):
            if statement.strip():
                conn.execute(sa.text(statement))
    lab.undo.append(lambda: _drop_rabbitmq(lab.rabbitmqctl,
                                           lab.db['cyborg']))
    for env, argv in commands(lab.names(blocks['rabbitmq'])):
        assert argv[0] == 'rabbitmqctl'
        lab.run(env, [lab.rabbitmqctl] + argv[1:])

    # 3. Placement.
    with open(os.path.join(lab.paths['/etc/placement'],
                           'placement.conf'), 'w') as f:
        f.write(lab.places(lab.names(blocks['placement.conf'])))
    for env, argv in commands(lab.places(blocks['placement'])):
        (lab.start if argv[0] in SERVICES else lab.run)(env, argv)

    # 4. Configuration.
    conf = lab.places(lab.names(blocks['cyborg.conf']))
    with open(lab.paths['/etc/cyborg/cyborg.conf'], 'w') as f:
        f.write(conf)

    # 5. Start, in the guide's order.
    outputs = []
    for env, argv in commands(lab.places(blocks['start'])):
        if argv[0] in SERVICES:
            lab.start(env, argv)
        else:
            outputs.append((argv, lab.run(env, argv)))
    head = migration.head()
    by_command = {' '.join(argv[3:]) if argv[0].startswith('cyborg-')
                  else argv[0]: out for argv, out in outputs}
    assert by_command['db sync'] == 'Database at revision %s\n' % head
    assert by_command['db version'] == '%s\n' % head
    assert re.match(r'compute node %s: provider \S+ \(created\)\n$'
                    % lab.node, by_command['nova-cyborg-flow'])

    # The agent's devices reach the API (and Placement, under the node).
    deadline = time.time() + TIMEOUT
    while True:
        deployables = requests.get(lab.api + '/deployables', timeout=10)
        deployables = deployables.json()['deployables']
        if deployables and all(d['rp_uuid'] for d in deployables):
            break
        assert time.time() < deadline, 'no devices reported:\n%s' % (
            lab.procs[-2].logs()[-3000:])
        time.sleep(0.5)

    # 6. Smoke test.
    [(env, curl), (flow_env, flow)] = commands(lab.places(blocks['smoke']))
    assert curl[0] == 'curl'
    created = json.loads(lab.run(env, curl))
    assert created['name'] == 'smoke', created
    out = lab.run(flow_env, flow)
    assert re.search(r'^instance \S+ on %s$' % lab.node, out, re.M), out
    assert '<hostdev' in out
    # --cleanup: nothing left behind.
    arqs = requests.get(lab.api + '/accelerator_requests', timeout=10)
    assert arqs.json()['arqs'] == []


POSTGRESQL = 'postgresql+psycopg2://postgres@127.0.0.1:5432/postgres'


def test_postgresql_block_then_db_sync(tmp_path):
    """The PostgreSQL variant of step 2: its users and databases, then the
    guide's PostgreSQL connection URL through `cyborg-manage db sync`.
    """
    engine = _server(POSTGRESQL, 'PostgreSQL')
    lab = Lab(tmp_path)
    with open(GUIDE) as f:
        [url] = re.findall(r'`connection = (postgresql\+psycopg2://\S+)`',
                           f.read())
    conf = os.path.join(lab.dir, 'cyborg.conf')
    with open(conf, 'w') as f:
        f.write('[database]\nconnection = %s\n'
                % lab.places(lab.names(url)))
    try:
        with engine.connect() as conn:
            for statement in lab.names(
                    guide_blocks()['postgresql']).split(';'):
                if statement.strip():
                    conn.execute(sa.text(statement))
        out = lab.run({}, ['cyborg-manage', '--config-file', conf,
                           'db', 'sync'])
        assert out == 'Database at revision %s\n' % migration.head()
    finally:
        with engine.connect() as conn:
            for name in lab.db.values():
                conn.execute(sa.text('DROP DATABASE IF EXISTS %s' % name))
                conn.execute(sa.text('DROP USER IF EXISTS %s' % name))
        engine.dispose()
