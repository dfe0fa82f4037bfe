"""Lists for people: one table row per resource (the columns of each kind) and the event log."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from virtplane.cli.errors import JsonObject
from virtplane.cli.host_use import cpu_use, memory_use
from virtplane.cli.kinds import KindInfo
from virtplane.cli.output import (
    OutputFormat,
    age,
    cell_text,
    dig,
    format_mib,
    new_table,
    print_structured,
    print_table,
    styled,
)

__all__ = ["Column", "event_id", "print_events", "print_resources", "resource_table", "sorted_events"]


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
    return f"{dig(host, 'status.allocated.vcpus', 0)}/{cell_text(_host_offers(host, 'vcpus'))}"


def _host_memory(host: JsonObject) -> str:
    return f"{format_mib(dig(host, 'status.allocated.memory_mib', 0))}/{format_mib(_host_offers(host, 'memory_mib'))}"


def _host_ratios(host: JsonObject) -> str:
    ratios = dig(host, "status.allocation_ratios")
    return f"{ratios.get('cpu'):g}/{ratios.get('memory'):g}" if isinstance(ratios, dict) else "-"


def _pool_scope(pool: JsonObject) -> Any:
    return dig(pool, "spec.host") or dig(pool, "spec.cluster") or dig(pool, "spec.hosts")


def _capacity_gib(pool: JsonObject) -> str:
    capacity = dig(pool, "status.capacity_gib") or dig(pool, "spec.capacity_gib")
    return f"{dig(pool, 'status.used_gib', 0)}/{cell_text(capacity)}Gi"


def _backup_progress(backup: JsonObject) -> str:
    total, done = dig(backup, "status.total_bytes", 0) or 0, dig(backup, "status.processed_bytes", 0) or 0
    if not total:
        return "-"
    return f"{format_mib(done // 2**20)}/{format_mib(total // 2**20)} ({100 * done // total}%)"


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
        Column("CPU USE", cpu_use, wide_only=True),  # real use beside allocation (cli/host_use)
        Column("MEM USE", memory_use, wide_only=True),
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
    "Network": [
        Column("NAME", _name),
        Column("KIND", lambda n: dig(n, "spec.kind")),
        Column("BRIDGE", lambda n: dig(n, "spec.bridge")),
        Column("VLAN", lambda n: dig(n, "spec.vlan")),
        Column("SUBNET", lambda n: dig(n, "spec.subnet")),
        Column("SCOPE", _pool_scope),
        Column("HOSTS", lambda n: len(dig(n, "status.hosts", []))),
        Column("IN-USE", lambda n: dig(n, "status.addresses_in_use", 0)),
        Column("FREE", lambda n: dig(n, "status.addresses_free")),
        Column("MESSAGE", lambda n: dig(n, "status.message"), wide_only=True),
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
        Column(
            "IPS", lambda vm: [n.get("ip") for n in dig(vm, "status.nics", []) if n.get("ip")], wide_only=True
        ),
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
    "BackupTarget": [
        Column("NAME", _name),
        Column("CLUSTER", lambda t: dig(t, "spec.cluster")),
        Column("CAPACITY", _capacity_gib),
        Column("FREE", lambda t: f"{dig(t, 'status.free_gib', 0)}Gi"),
        Column("HEALTHY", lambda t: dig(t, "status.healthy", False)),
        Column("AGE", _age),
        Column("PATH", lambda t: dig(t, "spec.path"), wide_only=True),
        Column("MESSAGE", lambda t: dig(t, "status.message"), wide_only=True),
    ],
    "BackupPolicy": [
        Column("NAME", _name),
        Column("TARGET", lambda p: dig(p, "spec.target")),
        Column("SCHEDULE", lambda p: dig(p, "spec.schedule")),
        Column("SELECTOR", lambda p: dig(p, "spec.selector")),
        Column("LAST RUN", lambda p: dig(p, "status.last_run")),
        Column("NEXT RUN", lambda p: dig(p, "status.next_run")),
        Column("MISSED", lambda p: dig(p, "status.missed_windows", 0)),
        Column("BACKUPS", lambda p: dig(p, "status.backups", 0)),
        Column("WAITING", lambda p: len(dig(p, "status.waiting", []) or []), wide_only=True),
        Column("PRUNED", lambda p: dig(p, "status.pruned", 0), wide_only=True),
        Column("MESSAGE", lambda p: dig(p, "status.message"), wide_only=True),
    ],
    "PlacementRule": [
        Column("NAME", _name),
        Column("TYPE", lambda r: dig(r, "spec.type")),
        Column("VMS", lambda r: dig(r, "spec.vm_selector")),
        # a VM-VM rule's enforcement (required when not given), a Host rule's mode
        Column("ENFORCEMENT", lambda r: dig(r, "spec.mode") or dig(r, "spec.enforcement") or "required"),
        Column("HOSTS", lambda r: dig(r, "spec.host_selector")),
        Column("AGE", _age),
    ],
    "VirtualMachineBackup": [
        Column("NAME", _name),
        Column("VM", lambda b: dig(b, "spec.vm")),
        Column("TARGET", lambda b: dig(b, "spec.target")),
        Column("PHASE", lambda b: dig(b, "status.phase"), colour=True),
        Column("MODE", lambda b: dig(b, "status.mode")),
        Column("PROGRESS", _backup_progress),
        Column("AGE", _age),
        Column("BASE", lambda b: dig(b, "status.base"), wide_only=True),
        Column("HOST", lambda b: dig(b, "status.host"), wide_only=True),
        Column("CONSISTENCY", lambda b: dig(b, "status.consistency"), wide_only=True),
        Column("MESSAGE", lambda b: dig(b, "status.message"), wide_only=True),
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


def resource_table(
    kind: KindInfo, resources: Sequence[JsonObject], *, wide: bool = False, event: str | None = None
) -> Table:
    """One row per resource; with ``event`` (a watch's ADDED, MODIFIED...) a first column says it."""
    columns = [c for c in _COLUMNS.get(kind.kind, _GENERIC_COLUMNS) if wide or not c.wide_only]
    if event is not None:
        columns.insert(0, Column("EVENT", lambda _: event))
    table = new_table([c.header for c in columns])
    for resource in resources:
        table.add_row(
            *(styled(c.value(resource)) if c.colour else cell_text(c.value(resource)) for c in columns)
        )
    return table


def print_resources(
    console: Console,
    kind: KindInfo,
    resources: Sequence[JsonObject],
    output: OutputFormat,
    *,
    headers: bool = True,
) -> None:
    """A list of resources, as a table (or wide table), or as ``{"items": [...]}`` JSON/YAML."""
    if print_structured({"items": list(resources)}, output):
        return
    if not resources:
        console.print(f"No {kind.plural} found.")
        return
    table = resource_table(kind, resources, wide=output is OutputFormat.WIDE)
    table.show_header = headers
    print_table(console, table)


def print_events(
    console: Console, events: Sequence[JsonObject], *, with_object: bool = True, headers: bool = True
) -> None:
    table = new_table(["AGE", "TYPE", "REASON", *(["OBJECT"] if with_object else []), "MESSAGE"])
    table.show_header = headers
    for event in events:
        row: list[Text | str] = [
            age(event.get("time")),
            styled(event.get("type")),
            cell_text(event.get("reason")),
        ]
        if with_object:
            row.append(f"{cell_text(event.get('kind'))}/{cell_text(event.get('name'))}")
        row.append(cell_text(event.get("message")))
        table.add_row(*row)
    print_table(console, table)


def sorted_events(items: list[JsonObject]) -> list[JsonObject]:
    """Oldest first, by the server's event id (then time)."""
    return sorted(items, key=lambda event: (event_id(event), str(event.get("time", ""))))


def event_id(event: JsonObject) -> int:
    value = event.get("id")
    return value if isinstance(value, int) else 0
