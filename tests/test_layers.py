"""The house reads top-down: api -> services -> controllers -> domain, drivers beside.

The contracts are in pyproject.toml (``[tool.importlinter]``); import-linter checks every
import, also those inside functions.
"""

from __future__ import annotations

from pathlib import Path

from importlinter.cli import lint_imports

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_every_layer_imports_only_what_lies_below_it() -> None:
    assert lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True) == 0
