# SPDX-License-Identifier: Apache-2.0
"""The import contracts of .importlinter hold: layers point down only.

The same check as `lint-imports` in `tox -e pep8`, run here so that the
README's test command (and so CI) enforces it. The layers, and why, are in
docs/architecture.md; imports inside functions count too.
"""

import pathlib

from importlinter import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / '.importlinter'


def test_import_contracts_are_kept(capsys, monkeypatch):
    # import-linter finds the packages from the working directory.
    monkeypatch.chdir(ROOT)
    status = cli.lint_imports(config_filename=str(CONTRACTS), no_cache=True,
                              no_logo=True)
    report = capsys.readouterr().out
    assert status == cli.EXIT_STATUS_SUCCESS, report
