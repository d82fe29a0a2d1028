# SPDX-License-Identifier: Apache-2.0
r"""The committed etc/cyborg samples match what the code generates.

When this fails, regenerate from the repository root and commit:

    oslo-config-generator \
        --config-file etc/cyborg/cyborg-config-generator.conf
    oslopolicy-sample-generator \
        --config-file etc/cyborg/cyborg-policy-generator.conf

(or `tox -e genconfig` / `tox -e genpolicy`).
"""

import difflib
import os

from oslo_config import cfg
from oslo_config import generator as config_generator
from oslo_policy import generator as policy_generator

ETC = os.path.join(os.path.dirname(__file__), '..', '..', 'etc', 'cyborg')


def _compare(committed_name, generated_path, how):
    committed_path = os.path.join(ETC, committed_name)
    with open(committed_path) as f:
        committed = f.read()
    with open(generated_path) as f:
        generated = f.read()
    if committed != generated:
        diff = ''.join(list(difflib.unified_diff(
            committed.splitlines(True), generated.splitlines(True),
            'committed', 'generated'))[:60])
        raise AssertionError(
            'etc/cyborg/%s is stale. Regenerate it from the repository '
            'root with `%s` and commit it.\n%s' % (committed_name, how, diff))


def test_config_sample_is_current(tmp_path):
    out = tmp_path / 'cyborg.conf.sample'
    config_generator.main([
        '--config-file', os.path.join(ETC, 'cyborg-config-generator.conf'),
        '--output-file', str(out)])
    _compare('cyborg.conf.sample', out,
             'oslo-config-generator --config-file '
             'etc/cyborg/cyborg-config-generator.conf')


def test_policy_sample_is_current(tmp_path):
    out = tmp_path / 'policy.yaml.sample'
    policy_generator.generate_sample(
        args=['--config-file',
              os.path.join(ETC, 'cyborg-policy-generator.conf'),
              '--output-file', str(out)],
        conf=cfg.ConfigOpts())
    _compare('policy.yaml.sample', out,
             'oslopolicy-sample-generator --config-file '
             'etc/cyborg/cyborg-policy-generator.conf')


def test_config_sample_does_not_depend_on_this_machine():
    with open(os.path.join(ETC, 'cyborg.conf.sample')) as f:
        sample = f.read()
    assert '#host = <hostname>\n' in sample
    for local in {os.uname().nodename, os.path.expanduser('~'),
                  os.getcwd()} - {'/'}:
        assert ' = %s\n' % local not in sample


def test_config_sample_lists_the_library_options_operators_set():
    with open(os.path.join(ETC, 'cyborg.conf.sample')) as f:
        sample = f.read()
    for section, option in [('database', 'connection'),          # oslo.db
                            ('DEFAULT', 'transport_url'),        # messaging
                            ('oslo_messaging_rabbit', 'amqp_durable_queues'),
                            ('keystone_authtoken', 'www_authenticate_uri'),
                            ('DEFAULT', 'log_file'),             # oslo.log
                            ('oslo_policy', 'policy_file'),
                            ('oslo_middleware',
                             'enable_proxy_headers_parsing'),
                            ('cors', 'allowed_origin')]:
        assert '[%s]' % section in sample
        assert '\n#%s = ' % option in sample, option
