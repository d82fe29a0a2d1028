# SPDX-License-Identifier: Apache-2.0
"""The import contracts of .importlinter hold: layers point down only.

The same check as `lint-imports` in `tox -e pep8`, run here so that the
README's test command (and so CI) enforces it. The layers, and why, are in
docs/architecture.md; imports inside functions count too.
"""

import logging
import pathlib

from importlinter import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / '.importlinter'


def test_import_contracts_are_kept(capsys, monkeypatch):
    # import-linter finds the packages from the working directory.
    monkeypatch.chdir(ROOT)
    # lint_imports() runs logging.config.dictConfig(), which disables every
    # logger that exists (caplog of later tests would see nothing).
    loggers = [logger for logger in logging.root.manager.loggerDict.values()
               if isinstance(logger, logging.Logger) and not logger.disabled]
    try:
        status = cli.lint_imports(config_filename=str(CONTRACTS),
                                  no_cache=True, no_logo=True)
    finally:
        for logger in loggers:
            logger.disabled = False
    report = capsys.readouterr().out
    assert status == cli.EXIT_STATUS_SUCCESS, report
