# SPDX-License-Identifier: Apache-2.0
"""The package as a user or packager installs it: a wheel built from this
checkout, installed in a fresh virtualenv, run from outside the checkout.

Building the wheel and installing it are real (`pip wheel`, then
`pip install --no-index --find-links DIST 'cyborg-gpu[EXTRA]'`). What the
fresh virtualenv does not do is download the dependencies again: it sees
the test virtualenv's installed distributions through a folder of links
(every one but cyborg-gpu's own, so the checkout's editable install stays
out of sight), which pip counts as installed. So the wheel's own files,
entry points, data and extras' names are what is tested, in seconds rather
than the minutes a download of ~150 packages takes.
"""

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = 'cyborg-gpu'
# Our top-level packages (setup.cfg's packages = find:).
PACKAGES = ('cyborg', 'cyborg_aio', 'cyborg_bench', 'cyborg_emulators',
            'cyborg_harness', 'nova_cyborg_client')
TIMEOUT = 600


def _run(argv, **kwargs):
    result = subprocess.run(argv, capture_output=True, text=True,
                            timeout=TIMEOUT, **kwargs)
    if result.returncode != 0:
        raise RuntimeError('%s exited %d:\n%s\n%s' % (
            ' '.join(argv), result.returncode, result.stdout[-3000:],
            result.stderr[-3000:]))
    return result.stdout


def copy_sources(dest):
    """The checkout's files as git sees them (tracked, and new files not
    ignored), without build outputs or virtualenvs: what a clone has.
    """
    names = _run(['git', '-C', ROOT, 'ls-files', '-z', '--cached',
                  '--others', '--exclude-standard']).split('\0')
    for name in filter(None, names):
        src = os.path.join(ROOT, name)
        if not os.path.lexists(src):
            continue    # deleted in the work tree, not yet committed
        target = os.path.join(dest, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    return dest


def build_wheel(workdir):
    """Path of a wheel of this checkout, built in `workdir` (from a copy:
    nothing is written into the checkout).
    """
    src = copy_sources(os.path.join(workdir, 'src'))
    dist = os.path.join(workdir, 'dist')
    _run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--quiet',
          '--wheel-dir', dist, src])
    [wheel] = [os.path.join(dist, n) for n in os.listdir(dist)
               if n.endswith('.whl')]
    return wheel


def _ours(name):
    base = name.split('-')[0].split('.')[0]
    return (base in PACKAGES or base == 'cyborg_gpu'
            or (name.startswith('__editable__') and 'cyborg_gpu' in name))


class Venv:
    """A fresh virtualenv with the wheel installed (pip install
    'cyborg-gpu[EXTRAS]' from the wheel's folder, no index).
    """

    def __init__(self, path, wheel, extras=('mysql',)):
        self.path = path
        self.bin = os.path.join(path, 'bin')
        self.python = os.path.join(self.bin, 'python')
        _run([sys.executable, '-m', 'venv', '--without-pip', path])
        purelib = _run([self.python, '-c', 'import sysconfig; '
                        'print(sysconfig.get_paths()["purelib"])']).strip()
        deps = os.path.join(path, 'borrowed')
        os.makedirs(deps)
        here = sysconfig.get_paths()['purelib']
        for name in os.listdir(here):
            if not _ours(name):
                os.symlink(os.path.join(here, name), os.path.join(deps,
                                                                  name))
        with open(os.path.join(purelib, 'borrowed.pth'), 'w') as f:
            f.write(deps + '\n')
        requirement = DIST + ('[%s]' % ','.join(extras) if extras else '')
        self.requirement = requirement
        self.install_log = _run([
            sys.executable, '-m', 'pip', '--python', self.python, 'install',
            '--no-index', '--find-links', os.path.dirname(wheel),
            requirement])
        self.site_packages = purelib

    def script(self, name):
        """A console script of this virtualenv: ours as the wheel
        installed them; a dependency's (gunicorn) as a launcher written
        from its entry point, as pip would have written it.
        """
        path = os.path.join(self.bin, name)
        if os.path.exists(path):
            return path
        [entry] = [ep for ep in importlib.metadata.entry_points(
            group='console_scripts') if ep.name == name]
        module, _, attr = entry.value.partition(':')
        with open(path, 'w') as f:
            f.write('#!%s\nimport importlib\nimport sys\n'
                    'target = importlib.import_module(%r)\n'
                    'for part in %r.split("."):\n'
                    '    target = getattr(target, part)\n'
                    'sys.exit(target())\n' % (self.python, module, attr))
        os.chmod(path, 0o755)
        return path

    def env(self):
        """Environment for its commands: its bin first on PATH."""
        env = dict(os.environ)
        env.pop('PYTHONPATH', None)
        env['PATH'] = self.bin + os.pathsep + env.get('PATH', '')
        env['VIRTUAL_ENV'] = self.path
        return env
