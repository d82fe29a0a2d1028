# SPDX-License-Identifier: Apache-2.0
"""The policy defaults, their sample and their documentation agree.

etc/cyborg/policy.yaml.sample is what oslopolicy-sample-generator makes
of the code's defaults, every rule says what it is for, every API rule
names the operations it guards, and the table in docs/security.md lists
exactly the defaults in code.
"""

import os
import re
import subprocess
import sys

from cyborg import policies

ROOT = os.path.join(os.path.dirname(__file__), '..', '..')
RULES = policies.list_rules()


def test_the_policy_sample_is_what_the_generator_makes(tmp_path):
    out = tmp_path / 'policy.yaml.sample'
    subprocess.run(
        [os.path.join(os.path.dirname(sys.executable),
                      'oslopolicy-sample-generator'),
         '--config-file', 'etc/cyborg/cyborg-policy-generator.conf',
         '--output-file', str(out)], cwd=ROOT, check=True,
        capture_output=True)
    with open(os.path.join(ROOT, 'etc', 'cyborg', 'policy.yaml.sample')) as f:
        assert f.read() == out.read_text(), (
            'Regenerate etc/cyborg/policy.yaml.sample with '
            'oslopolicy-sample-generator --config-file '
            'etc/cyborg/cyborg-policy-generator.conf')


def test_every_rule_has_a_description():
    assert all(len(rule.description.strip()) > 10 for rule in RULES)


def test_every_api_rule_names_its_operations():
    for rule in RULES:
        if rule.name.startswith('cyborg:'):
            assert rule.operations, rule.name
            assert all(op['method'] in ('GET', 'POST', 'PATCH', 'DELETE')
                       and op['path'].startswith('/v2/')
                       for op in rule.operations), rule.name


def test_rule_names_are_unique():
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))


def test_the_documented_table_is_the_defaults():
    with open(os.path.join(ROOT, 'docs', 'security.md')) as f:
        doc = f.read()
    documented = dict(re.findall(r'^\| `([^`]+)` \| `([^`]+)` \|', doc,
                                 re.MULTILINE))
    assert documented == {rule.name: rule.check_str for rule in RULES}
