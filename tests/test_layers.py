"""The house reads top-down: api -> services -> controllers -> domain, drivers beside.

The contracts are in pyproject.toml (``[tool.importlinter]``); import-linter checks every
import, also those inside functions.
"""

from __future__ import annotations

import ast
import logging
import re
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


# The composition root hands each part to the API by its type: ``Any`` there hid which part a
# route gets (issue 33). Each name here: a class (every field) or a function (its signature).
TYPED_PARTS = {
    "api/context.py": ("ApiContext",),
    "bootstrap.py": ("ControlPlaneOptions", "ControlPlane.__init__", "default_driver_factory"),
    "server.py": ("sim_factory",),
}


def _annotations_naming_any(source: str, names: tuple[str, ...]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        for child in body if isinstance(body, list) else []:
            if not isinstance(child, ast.ClassDef | ast.FunctionDef):
                continue
            qualified = f"{node.name}.{child.name}" if isinstance(node, ast.ClassDef) else child.name
            if qualified not in names:
                continue
            if isinstance(child, ast.ClassDef):
                annotations = [s.annotation for s in child.body if isinstance(s, ast.AnnAssign)]
            else:
                arguments = [*child.args.args, *child.args.kwonlyargs]
                annotations = [a.annotation for a in arguments if a.annotation] + [child.returns]
            for annotation in annotations:
                if annotation is not None and re.search(r"\bAny\b", ast.unparse(annotation)):
                    found.append(f"{qualified}: {ast.unparse(annotation)}")
    return found


def test_the_parts_handed_to_the_api_are_typed() -> None:
    root = PYPROJECT.parent / "src" / "virtplane"
    offenders = {
        path: found
        for path, names in TYPED_PARTS.items()
        if (found := _annotations_naming_any((root / path).read_text(), names))
    }
    assert offenders == {}
    assert _annotations_naming_any("class C:\n    sim: Any = None\n", ("C",))
    assert _annotations_naming_any("def f(x: list[Any]) -> None: ...\n", ("f",))
