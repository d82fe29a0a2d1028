# SPDX-License-Identifier: Apache-2.0
"""The service package never imports the emulators: fake hardware plugs
itself in through the drivers' hooks (sysfs.register_simulated)."""

import ast
import os

import cyborg

ROOT = os.path.dirname(cyborg.__file__)
# The all-in-one stack still lives here until it moves to cyborg_aio; it
# starts the emulated GPUs a host spec asks for.
ALLOWED = {os.path.join('embedded', 'stack.py')}


def _imports(path):
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_cyborg_does_not_import_cyborg_emulators():
    offenders = []
    scanned = 0
    for folder, _dirs, files in os.walk(ROOT):
        for name in files:
            if not name.endswith('.py'):
                continue
            path = os.path.join(folder, name)
            if os.path.relpath(path, ROOT) in ALLOWED:
                continue
            scanned += 1
            offenders += ['%s imports %s' % (path, module)
                          for module in _imports(path)
                          if module.split('.')[0] == 'cyborg_emulators']
    assert scanned > 50
    assert offenders == []
