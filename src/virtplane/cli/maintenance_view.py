"""A host's maintenance for people: its phase, the plan, and each VM's progress in words."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from virtplane.cli.errors import JsonObject
from virtplane.cli.output import cell_text, dig, new_table, print_table, styled
from virtplane.cli.progress_view import Frame, move_row

__all__ = ["maintenance_frame", "print_maintenance"]


def print_maintenance(console: Console, maintenance: JsonObject) -> None:
    """A host maintenance: its phase and strategy, the plan, and per-VM progress."""
    flags = " (dry run)" if maintenance.get("dry_run") else ""
    console.print(
        Text.assemble(
            (f"Maintenance of host/{cell_text(maintenance.get('host'))}{flags}: ", "bold"),
            styled(maintenance.get("phase")),
            f"  strategy={cell_text(maintenance.get('strategy'))}",
        )
    )
    if maintenance.get("message"):
        console.print(Text(str(maintenance["message"])))
    plan_items = dig(maintenance, "plan.items", [])
    progress = maintenance.get("progress") or {}
    if not plan_items:
        console.print("Plan: nothing to move.")
        return
    table = new_table(["VM", "ACTION", "TARGET", "REASON", "PROGRESS"])
    for item in plan_items:
        vm = item.get("vm")
        reason = cell_text(item.get("reason"))
        if item.get("risk"):
            reason = f"{reason}; RISK: {item['risk']}"
        moving = move_row(f"vm/{vm}", progress[vm]) if vm in progress else None
        table.add_row(
            cell_text(vm),
            cell_text(item.get("action")),
            cell_text(item.get("target")),
            reason,
            (f"{moving.words} ({moving.measured})" if moving.measured else moving.words) if moving else "-",
        )
    print_table(console, table)


def maintenance_frame(snapshot: JsonObject) -> Frame:
    """What ``host maintenance enable --wait`` shows of ``{"host": <Host>, "maintenance": ...}``:
    the host's state (and message) as the title, one row per VM the drain moves or stops."""
    host = str(dig(snapshot, "host.metadata.name", "?"))
    title = f"host/{host}: {dig(snapshot, 'host.status.resource_state', 'Unknown')}"
    message = dig(snapshot, "maintenance.message") or dig(snapshot, "host.status.message")
    if message:
        title += f" ({message})"
    progress = dig(snapshot, "maintenance.progress", {})
    rows = (
        [move_row(f"vm/{vm}", entry) for vm, entry in sorted(progress.items())]
        if isinstance(progress, dict)
        else []
    )
    return Frame(rows=tuple(rows), title=title)
