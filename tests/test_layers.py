"""The house reads top-down: api -> services -> controllers -> domain, drivers beside.

The contracts are in pyproject.toml (``[tool.importlinter]``); import-linter checks every
import, also those inside functions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


@pytest.fixture
def logging_kept() -> Iterator[None]:
    """import-linter configures logging with ``dictConfig``, which disables every logger that
    exists (virtplane's own among them): every later test that reads a log line would see
    nothing. Put each logger, and the root's handlers, back as they were."""
    loggers = [logging.getLogger()] + [
        logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    kept = [
        (logger, logger.disabled, list(logger.handlers), logger.level, logger.propagate) for logger in loggers
    ]
    yield
    for logger, disabled, handlers, level, propagate in kept:
        logger.disabled, logger.handlers, logger.level, logger.propagate = (
            disabled,
            handlers,
            level,
            propagate,
        )


def test_every_layer_imports_only_what_lies_below_it(logging_kept: None) -> None:
    assert lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True) == 0
