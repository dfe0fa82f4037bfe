"""Rendering of resources for people (Rich tables, describe) and for scripts (JSON, YAML)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from virtplane.cli.client import JsonObject
from virtplane.cli.kinds import KindInfo

__all__ = [
    "OutputFormat",
    "age",
    "dig",
    "format_mib",
    "make_console",
    "print_describe",
    "print_error",
    "print_events",
    "print_json",
    "print_maintenance",
    "print_resources",
    "print_structured",
    "print_table",
    "print_yaml",
    "progress_summary",
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


def format_mib(mib: Any) -> str:
    if not isinstance(mib, int | float):
        return "-"
    if mib == 0:
        return "0"
    if mib >= 1024:
        gib = mib / 1024
        return f"{int(gib)}Gi" if gib == int(gib) else f"{gib:.1f}Gi"
    return f"{int(mib)}Mi"


def _text(value: Any) -> str:
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
    text = _text(value)
    if text in _GOOD:
        return Text(text, style="green")
    if text in _BAD:
        return Text(text, style="bold red")
    if text in _BUSY:
        return Text(text, style="yellow")
    return Text(text)


# --------------------------------------------------------------------------- columns per kind


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[JsonObject], Any]
    wide_only: bool = False
    colour: bool = False


def _host_offers(host: JsonObject, field: str) -> Any:
    """What placement may give out: allocatable (capacity x allocation ratio), else the capacity."""
    return dig(
        host,
        f"status.allocatable.{field}",
        dig(host, f"status.capacity.{field}", dig(host, f"spec.capacity.{field}")),
    )


def _host_cpu(host: JsonObject) -> str:
    return f"{dig(host, 'status.allocated.vcpus', 0)}/{_text(_host_offers(host, 'vcpus'))}"


def _host_memory(host: JsonObject) -> str:
    return f"{format_mib(dig(host, 'status.allocated.memory_mib', 0))}/{format_mib(_host_offers(host, 'memory_mib'))}"


def _host_ratios(host: JsonObject) -> str:
    ratios = dig(host, "status.allocation_ratios")
    return f"{ratios.get('cpu'):g}/{ratios.get('memory'):g}" if isinstance(ratios, dict) else "-"


def _pool_scope(pool: JsonObject) -> Any:
    return dig(pool, "spec.host") or dig(pool, "spec.cluster") or dig(pool, "spec.hosts")


def _capacity_gib(pool: JsonObject) -> str:
    capacity = dig(pool, "status.capacity_gib") or dig(pool, "spec.capacity_gib")
    return f"{dig(pool, 'status.used_gib', 0)}/{_text(capacity)}Gi"


def _conditions(resource: JsonObject) -> str:
    conditions = dig(resource, "status.conditions", [])
    shown = [f"{c.get('type')}={c.get('status')}" for c in conditions if isinstance(c, dict)]
    return ",".join(shown) or "-"


def _name(resource: JsonObject) -> Any:
    return dig(resource, "metadata.name")


def _age(resource: JsonObject) -> str:
    return age(dig(resource, "metadata.created_at"))


_COLUMNS: dict[str, list[Column]] = {
    "Host": [
        Column("NAME", _name),
        Column("STATE", lambda h: dig(h, "status.resource_state"), colour=True),
        Column("CONNECTION", lambda h: dig(h, "status.connection"), colour=True),
        Column("CLUSTER", lambda h: dig(h, "spec.cluster")),
        Column("VMS", lambda h: dig(h, "status.allocated.vms", 0)),
        Column("CPU", _host_cpu),
        Column("MEM", _host_memory),
        Column("URI", lambda h: dig(h, "spec.uri"), wide_only=True),
        Column("ENABLED", lambda h: dig(h, "spec.enabled", True), wide_only=True),
        Column("AGE", _age, wide_only=True),
        Column("RATIOS", _host_ratios, wide_only=True),
        Column("MESSAGE", lambda h: dig(h, "status.message"), wide_only=True),
    ],
    "StoragePool": [
        Column("NAME", _name),
        Column("KIND", lambda p: dig(p, "spec.kind")),
        Column("CONTENT", lambda p: dig(p, "spec.content", "volumes")),
        Column("SCOPE", _pool_scope),
        Column("USED/CAPACITY", _capacity_gib),
        Column("REACHABLE", lambda p: dig(p, "status.reachable_hosts"), wide_only=True),
        Column("AGE", _age),
    ],
    "Image": [
        Column("NAME", _name),
        Column("KIND", lambda i: dig(i, "spec.kind")),
        Column("POOL", lambda i: dig(i, "spec.pool")),
        Column("FILE", lambda i: dig(i, "spec.file")),
        Column("PHASE", lambda i: dig(i, "status.phase"), colour=True),
        Column("HOSTS", lambda i: dig(i, "status.hosts"), wide_only=True),
        Column("MESSAGE", lambda i: dig(i, "status.message"), wide_only=True),
        Column("AGE", _age),
    ],
    "Volume": [
        Column("NAME", _name),
        Column("POOL", lambda v: dig(v, "spec.pool")),
        Column("SIZE", lambda v: f"{dig(v, 'spec.size_gib', '-')}Gi"),
        Column("PHASE", lambda v: dig(v, "status.phase"), colour=True),
        Column("VM", lambda v: dig(v, "status.attached_vm")),
        Column("PATH", lambda v: dig(v, "status.path"), wide_only=True),
        Column("AGE", _age),
    ],
    "VirtualMachine": [
        Column("NAME", _name),
        Column("PHASE", lambda vm: dig(vm, "status.phase"), colour=True),
        Column("HOST", lambda vm: dig(vm, "status.host")),
        Column("POLICY", lambda vm: dig(vm, "spec.run_policy")),
        Column("CPU", lambda vm: dig(vm, "spec.cpu")),
        Column("MEMORY", lambda vm: format_mib(dig(vm, "spec.memory_mib"))),
        Column("AGE", _age),
        Column("LAST-EXIT", lambda vm: dig(vm, "status.last_exit"), wide_only=True),
        Column("MIGRATION", lambda vm: dig(vm, "spec.live_migration_policy"), wide_only=True),
        Column("CONDITIONS", _conditions, wide_only=True),
        Column("MESSAGE", lambda vm: dig(vm, "status.message"), wide_only=True),
    ],
    "VirtualMachineSnapshot": [
        Column("NAME", _name),
        Column("VM", lambda s: dig(s, "spec.vm")),
        Column("PHASE", lambda s: dig(s, "status.phase"), colour=True),
        Column("MEMORY", lambda s: dig(s, "spec.with_memory", False)),
        Column("POWER", lambda s: dig(s, "status.power_state")),
        Column("AGE", _age),
        Column("HOST", lambda s: dig(s, "status.host"), wide_only=True),
        Column("MESSAGE", lambda s: dig(s, "status.message"), wide_only=True),
    ],
    "VirtualMachineOperation": [
        Column("NAME", _name),
        Column("VM", lambda o: dig(o, "spec.vm")),
        Column("TYPE", lambda o: dig(o, "spec.type")),
        Column("PHASE", lambda o: dig(o, "status.phase"), colour=True),
        Column("STEP", lambda o: dig(o, "status.step")),
        Column("MESSAGE", lambda o: dig(o, "status.message")),
        Column("FORCE", lambda o: dig(o, "spec.force", False), wide_only=True),
        Column("AGE", _age, wide_only=True),
    ],
    "Setting": [
        Column("KEY", _name),
        Column("VALUE", lambda s: dig(s, "spec.value")),
        Column("DEFAULT", lambda s: dig(s, "status.default")),
        Column("TYPE", lambda s: dig(s, "status.type")),
        Column("SCOPE", lambda s: dig(s, "status.scope"), wide_only=True),
        Column("ALLOWED", lambda s: dig(s, "status.allowed"), wide_only=True),
        Column("DESCRIPTION", lambda s: dig(s, "status.description"), wide_only=True),
    ],
}

_GENERIC_COLUMNS = [Column("NAME", _name), Column("AGE", _age)]


def _new_table(headers: Sequence[str]) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, overflow="fold")
    return table


def resource_table(
    kind: KindInfo, resources: Sequence[JsonObject], *, wide: bool = False, event: str | None = None
) -> Table:
    """One row per resource; with ``event`` (a watch's ADDED, MODIFIED...) a first column says it."""
    columns = [c for c in _COLUMNS.get(kind.kind, _GENERIC_COLUMNS) if wide or not c.wide_only]
    if event is not None:
        columns.insert(0, Column("EVENT", lambda _: event))
    table = _new_table([c.header for c in columns])
    for resource in resources:
        table.add_row(*(styled(c.value(resource)) if c.colour else _text(c.value(resource)) for c in columns))
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


def print_resources(
    console: Console, kind: KindInfo, resources: Sequence[JsonObject], output: OutputFormat
) -> None:
    """A list of resources, as a table (or wide table), or as ``{"items": [...]}`` JSON/YAML."""
    if print_structured({"items": list(resources)}, output):
        return
    if not resources:
        console.print(f"No {kind.plural} found.")
    else:
        print_table(console, resource_table(kind, resources, wide=output is OutputFormat.WIDE))


def print_events(console: Console, events: Sequence[JsonObject], *, with_object: bool = True) -> None:
    table = _new_table(["AGE", "TYPE", "REASON", *(["OBJECT"] if with_object else []), "MESSAGE"])
    for event in events:
        row: list[Text | str] = [
            age(event.get("time")),
            styled(event.get("type")),
            _text(event.get("reason")),
        ]
        if with_object:
            row.append(f"{_text(event.get('kind'))}/{_text(event.get('name'))}")
        row.append(_text(event.get("message")))
        table.add_row(*row)
    print_table(console, table)


def _without_empty_values(value: Any) -> Any:
    """Drop nulls and empty strings, lists and maps: describe shows what is set."""
    if isinstance(value, dict):
        cleaned = {k: _without_empty_values(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_without_empty_values(v) for v in value]
    return value


def print_describe(
    console: Console, kind: KindInfo, resource: JsonObject, events: Sequence[JsonObject]
) -> None:
    """The resource as YAML, then its conditions and its recent events as tables."""
    status = dict(dig(resource, "status", {}))
    conditions = status.pop("conditions", None) or []
    summary = _without_empty_values(
        {
            "kind": resource.get("kind", kind.kind),
            "metadata": resource.get("metadata", {}),
            "spec": resource.get("spec", {}),
            "status": status,
        }
    )
    console.print(Text(yaml.safe_dump(summary, sort_keys=False, allow_unicode=True).rstrip()))
    console.print()
    if conditions:
        console.print(Text("Conditions:", style="bold"))
        table = _new_table(["TYPE", "STATUS", "REASON", "MESSAGE"])
        for condition in conditions:
            table.add_row(
                _text(condition.get("type")),
                styled(condition.get("status")),
                _text(condition.get("reason")),
                _text(condition.get("message")),
            )
        print_table(console, table)
    else:
        console.print("Conditions: <none>")
    console.print()
    if events:
        console.print(Text("Events:", style="bold"))
        print_events(console, events, with_object=False)
    else:
        console.print("Events: <none>")


def progress_summary(progress: Any) -> str:
    """One line for a per-VM progress entry: ``phase=Migrating, target=h2, percent=40``."""
    if not isinstance(progress, dict):
        return _text(progress)
    shown = [f"{key}={_text(value)}" for key, value in progress.items() if value not in (None, "", [], {})]
    return ", ".join(shown) or "-"


def print_maintenance(console: Console, maintenance: JsonObject) -> None:
    """A host maintenance: its phase and strategy, the plan, and per-VM progress."""
    flags = " (dry run)" if maintenance.get("dry_run") else ""
    console.print(
        Text.assemble(
            (f"Maintenance of host/{_text(maintenance.get('host'))}{flags}: ", "bold"),
            styled(maintenance.get("phase")),
            f"  strategy={_text(maintenance.get('strategy'))}",
        )
    )
    if maintenance.get("message"):
        console.print(Text(str(maintenance["message"])))
    plan_items = dig(maintenance, "plan.items", [])
    progress = maintenance.get("progress") or {}
    if not plan_items:
        console.print("Plan: nothing to move.")
        return
    table = _new_table(["VM", "ACTION", "TARGET", "REASON", "PROGRESS"])
    for item in plan_items:
        vm = item.get("vm")
        table.add_row(
            _text(vm),
            _text(item.get("action")),
            _text(item.get("target")),
            _text(item.get("reason")),
            progress_summary(progress.get(vm)) if vm in progress else "-",
        )
    print_table(console, table)
