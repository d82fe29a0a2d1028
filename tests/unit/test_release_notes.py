# SPDX-License-Identifier: Apache-2.0
"""Every release note parses and uses only reno's sections.

The same checks as `tox -e releasenotes` (`reno lint`) and a little
stricter (reno only warns about a section that is not a list), without
needing reno installed: the README's test command runs them.
"""

import pathlib
import re

import pytest
import yaml

NOTES = pathlib.Path(__file__).resolve().parents[2] / 'releasenotes' / 'notes'
# reno's default `sections` option, and its `prelude_section_name`.
SECTIONS = ('features', 'issues', 'upgrade', 'deprecations', 'critical',
            'security', 'fixes', 'other')
PRELUDE = 'prelude'
# What `reno new <slug>` writes: the slug, a dash, 16 hex digits (the uid).
NAME = re.compile(r'^[a-z0-9][a-z0-9-]*-(?P<uid>[0-9a-f]{16})\.yaml$')
# Sentences of the template `reno new` writes, left in by mistake.
TEMPLATE = ('Replace this text with content', 'or remove this section')


def _notes():
    return sorted(NOTES.glob('*.yaml'))


def test_there_are_notes_and_nothing_else():
    assert _notes(), 'no release notes under %s' % NOTES
    others = [p.name for p in NOTES.iterdir() if p.suffix != '.yaml']
    assert others == [], 'not a reno note (.yaml): %s' % others


def test_note_uids_are_unique():
    uids = {}
    for path in _notes():
        match = NAME.match(path.name)
        if match:
            uids.setdefault(match['uid'], []).append(path.name)
    assert {u: n for u, n in uids.items() if len(n) > 1} == {}


@pytest.mark.parametrize('path', _notes(), ids=lambda p: p.name)
def test_note_is_valid(path):
    assert NAME.match(path.name), (
        '%s: name it <slug>-<16 hex digits>.yaml (`reno new <slug>`)'
        % path.name)
    note = yaml.safe_load(path.read_text(encoding='utf-8'))
    assert isinstance(note, dict) and note, (
        '%s: a note is a mapping of sections' % path.name)
    unknown = sorted(set(note) - set(SECTIONS) - {PRELUDE})
    assert unknown == [], '%s: unknown section(s) %s; reno knows %s' % (
        path.name, unknown, (PRELUDE,) + SECTIONS)
    if PRELUDE in note:
        assert isinstance(note[PRELUDE], str) and note[PRELUDE].strip(), (
            '%s: the prelude is one non-empty string' % path.name)
        _no_template_text(path, PRELUDE, note[PRELUDE])
    for section in set(note) & set(SECTIONS):
        items = note[section]
        assert isinstance(items, list) and items, (
            '%s: %s is a non-empty list' % (path.name, section))
        for item in items:
            assert isinstance(item, str) and item.strip(), (
                '%s: every %s item is non-empty text' % (path.name, section))
            _no_template_text(path, section, item)


def _no_template_text(path, section, text):
    left = [t for t in TEMPLATE if t in text]
    assert left == [], '%s: %s still holds the template text of `reno new`' % (
        path.name, section)
