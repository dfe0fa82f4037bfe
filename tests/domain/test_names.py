"""Every name pattern is matched whole: a trailing newline is no part of a name.

Python's ``$`` matches before a final newline, so ``re.match(r"^[a-z]+$", "x\\n")`` accepts
``"x\\n"``; the names module matches with ``fullmatch``, and each pattern lives there only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field, TypeAdapter, ValidationError

from virtplane.domain.names import ALL_PATTERNS, NamePattern

SRC = Path(__file__).resolve().parents[2] / "src" / "virtplane"


@pytest.mark.parametrize("pattern", [p for p in ALL_PATTERNS if not p.newlines], ids=lambda p: p.what)
def test_a_trailing_newline_is_refused(pattern: NamePattern) -> None:
    assert pattern.matches(pattern.example)
    for bad in (pattern.example + "\n", "\n" + pattern.example, pattern.example + "\r\n"):
        assert not pattern.matches(bad), repr(bad)
    checked = TypeAdapter(Annotated[str, Field(pattern=pattern.anchored)])
    assert checked.validate_python(pattern.example) == pattern.example
    with pytest.raises(ValidationError):
        checked.validate_python(pattern.example + "\n")


def test_the_models_keep_their_pattern_strings() -> None:
    """The JSON schema, whose fingerprint decides whether stored bodies are rewritten, is as before."""
    from virtplane.domain.names import MIGRATION_ADDRESS

    assert MIGRATION_ADDRESS.anchored == r"^(\[?[0-9A-Fa-f:.]+\]?|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$"


def test_every_name_pattern_lives_in_the_names_module() -> None:
    """No anchored regular expression, nor a pydantic pattern of its own, outside names.py."""
    anchored = re.compile(r"""re\.compile\(\s*r?["']\^|pattern=r?["']""")
    found = [
        f"{path.relative_to(SRC)}:{number}"
        for path in SRC.rglob("*.py")
        if path.name != "names.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if anchored.search(line)
    ]
    assert found == []
