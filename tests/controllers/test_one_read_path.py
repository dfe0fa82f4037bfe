"""Issue 33: a controller reads through ``ctx.read`` and writes through ``ctx.write`` or
``ctx.durable`` (``controllers/context.py`` is the one place that talks to the store for them).
A scan of the package keeps it so: a store read or write in a controller is named here."""

from __future__ import annotations

import re
from pathlib import Path

import virtplane.controllers

PACKAGE = Path(virtplane.controllers.__file__).parent
STORE_CALL = re.compile(r"\.store\.(find|get|list_objects|mutate|update|update_status|delete|create)\(")


def test_no_controller_reads_or_writes_the_store_but_through_its_context() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "context.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if STORE_CALL.search(line)
    ]
    assert found == [], "use ctx.read / ctx.write / ctx.durable:\n" + "\n".join(found)
