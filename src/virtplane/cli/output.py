"""Output shared by every command: the formats, consoles, errors, small formatters and tables.

What a kind of thing looks like lives beside it: ``tables`` (lists of resources and events),
``describing`` (``describe``), ``maintenance_view`` (a host's plan) and ``progress_view``
(what ``--wait`` shows).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "OutputFormat",
    "age",
    "cell_text",
    "dig",
    "format_mib",
    "make_console",
    "new_table",
    "print_error",
    "print_json",
    "print_structured",
    "print_table",
    "print_yaml",
    "styled",
]

DEFAULT_PIPE_WIDTH = 200


class OutputFormat(StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


def make_console(*, stderr: bool = False) -> Console:
    """A console on the current stdout/stderr; wide when piped so tables are not wrapped at 80."""
    stream = sys.stderr if stderr else sys.stdout
    width: int | None = None
    if not stream.isatty():
        width = int(os.environ.get("COLUMNS", "0") or 0) or DEFAULT_PIPE_WIDTH
    return Console(file=stream, width=width, highlight=False, soft_wrap=stderr)


def print_error(console: Console, reason: str, message: str) -> None:
    console.print(Text(f"Error ({reason}): {message}", style="red"))


# --------------------------------------------------------------------------- small formatters


def dig(obj: Any, path: str, default: Any = None) -> Any:
    """``dig(vm, "status.phase")``: a nested value, or ``default`` if any step is missing."""
    current = obj
    for part in path.split("."):
        if not isinstance(current, dict) or part not in current:
            return default
        current = current[part]
    return default if current is None else current


def age(timestamp: Any, now: datetime | None = None) -> str:
    """``"42s"``, ``"5m"``, ``"3h"``, ``"2d"`` since an ISO-8601 timestamp; ``"-"`` if unknown."""
    if not isinstance(timestamp, str) or not timestamp:
        return "-"
    try:
        then = datetime.fromisoformat(timestamp)
    except ValueError:
        return "-"
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def format_rate(bytes_per_s: float | None) -> str:
    """Bytes per second in the unit that fits ("-" for no figure)."""
    if bytes_per_s is None:
        return "-"
    value = bytes_per_s
    for unit in ("B/s", "KiB/s", "MiB/s"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B/s" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB/s"


def format_mib(mib: Any) -> str:
    if not isinstance(mib, int | float):
        return "-"
    if mib == 0:
        return "0"
    if mib >= 1024:
        gib = mib / 1024
        return f"{int(gib)}Gi" if gib == int(gib) else f"{gib:.1f}Gi"
    return f"{int(mib)}Mi"


def cell_text(value: Any) -> str:
    """A value as a table cell: ``-`` for nothing, lists joined, maps as compact JSON."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


_GOOD = {"Running", "Ready", "Completed", "Enabled", "Up", "True", "Normal", "created", "configured"}
_BAD = {"Failed", "ErrorInMaintenance", "ErrorInPrepareForMaintenance", "Down", "Degraded", "Warning"}
_BUSY = {
    "Pending",
    "Starting",
    "Stopping",
    "Migrating",
    "InProgress",
    "PrepareForMaintenance",
    "Disconnected",
    "Unknown",
}


def styled(value: Any) -> Text:
    """A cell whose colour says whether the state is good, bad or in progress."""
    text = cell_text(value)
    if text in _GOOD:
        return Text(text, style="green")
    if text in _BAD:
        return Text(text, style="bold red")
    if text in _BUSY:
        return Text(text, style="yellow")
    return Text(text)


def new_table(headers: Sequence[str]) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, overflow="fold")
    return table


def print_table(console: Console, table: Table) -> None:
    """Print a table; into a pipe or file without the padding Rich leaves at line ends."""
    if console.is_terminal:
        console.print(table)
        return
    with console.capture() as captured:
        console.print(table)
    console.file.write("\n".join(line.rstrip() for line in captured.get().splitlines()) + "\n")


def print_json(data: Any) -> None:
    """Exactly the JSON the server sent, indented: for scripts (``| jq``)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_yaml(data: Any) -> None:
    import yaml  # here, not at the top: every command imports this module (issue 39)

    sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True))


def print_structured(data: Any, output: OutputFormat) -> bool:
    """Print ``data`` as JSON or YAML when that is the format asked for; return whether it did."""
    if output is OutputFormat.JSON:
        print_json(data)
        return True
    if output is OutputFormat.YAML:
        print_yaml(data)
        return True
    return False
