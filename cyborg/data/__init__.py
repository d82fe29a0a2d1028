# SPDX-License-Identifier: Apache-2.0
"""Data files shipped inside the package: fake host specs and device profiles.

They are found with importlib.resources, so an installed wheel (not only a
source checkout) has them. In a checkout, etc/cyborg/fake-hosts and
etc/cyborg/device-profiles are links to these directories.

A host spec or profile is named either by its shipped name (``gpu-host``,
``h200-whole``) or by a path to a file of one's own.
"""

import importlib.resources
import json
import os

FAKE_HOSTS = 'fake-hosts'
DEVICE_PROFILES = 'device-profiles'
_SUFFIX = {FAKE_HOSTS: '.yaml', DEVICE_PROFILES: '.json'}


class NotFound(LookupError):
    """A name that is neither a shipped file nor an existing path."""


def _folder(kind):
    return importlib.resources.files(__name__).joinpath(kind)


def names(kind):
    """The shipped names of one kind (FAKE_HOSTS or DEVICE_PROFILES)."""
    suffix = _SUFFIX[kind]
    return sorted(entry.name[:-len(suffix)]
                  for entry in _folder(kind).iterdir()
                  if entry.name.endswith(suffix))


def path(kind, name_or_path):
    """A filesystem path for a shipped name or an existing file path."""
    if os.path.sep in name_or_path or os.path.isfile(name_or_path):
        if not os.path.isfile(name_or_path):
            raise NotFound('%s: no such file' % name_or_path)
        return os.path.abspath(name_or_path)
    suffix = _SUFFIX[kind]
    name = name_or_path[:-len(suffix)] if name_or_path.endswith(
        suffix) else name_or_path
    entry = _folder(kind).joinpath(name + suffix)
    if not entry.is_file():
        raise NotFound('%s is not a shipped %s (shipped: %s) nor a file'
                       % (name_or_path, kind[:-1].replace('-', ' '),
                          ', '.join(names(kind))))
    # Packages are installed as directories (never zipped: setup.cfg), so a
    # shipped file has a real path.
    return str(entry)


def fake_host(name_or_path='gpu-host'):
    """Path of a fake host spec, by shipped name or path."""
    return path(FAKE_HOSTS, name_or_path)


def folder(kind):
    """Filesystem path of the shipped directory of one kind."""
    return str(_folder(kind))


def profile(name_or_path):
    """A device profile file's content (name, description, groups)."""
    with open(path(DEVICE_PROFILES, name_or_path)) as f:
        return json.load(f)
