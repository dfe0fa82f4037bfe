"""``virtplane describe KIND NAME``: one object in full, with what explains its state.

Every kind: the object (what is set), its conditions, its recent events. A VM adds its
operations (``fieldSelector spec.vm=NAME``), a host the VMs it runs (``status.host=NAME``)
and its maintenance while it has one. Each is one request of the public API; a part the
token may not read is left out with a note on stderr, the rest is still shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from virtplane.cli.completion import complete_name
from virtplane.cli.context import CliState, state_of
from virtplane.cli.errors import ApiError, JsonObject
from virtplane.cli.host_use import print_use
from virtplane.cli.kinds import KindInfo, complete_kind, resolve_kind
from virtplane.cli.maintenance_view import print_maintenance
from virtplane.cli.output import age, cell_text, dig, format_mib, new_table, print_table, styled
from virtplane.cli.tables import print_events, sorted_events

__all__ = ["DESCRIBE_EVENT_LIMIT", "DESCRIBE_OPERATION_LIMIT", "describe"]

DESCRIBE_EVENT_LIMIT = 20
DESCRIBE_OPERATION_LIMIT = 10


def describe(
    ctx: typer.Context,
    kind: Annotated[
        str,
        typer.Argument(
            help="vm, host, pool, volume, snapshot, operation, image or setting "
            "(singular, plural, kind name or short alias)",
            show_default=False,
            autocompletion=complete_kind,
        ),
    ],
    name: Annotated[
        str,
        typer.Argument(
            help="The resource's name (a setting's key).", show_default=False, autocompletion=complete_name
        ),
    ],
) -> None:
    """Show one resource in full: its conditions, a VM's operations, a host's VMs and
    maintenance, and its last 20 events."""
    state = state_of(ctx)
    info = resolve_kind(kind)
    resource = state.client.get(info.plural, name)
    console = state.console
    _print_object(console, info, resource)
    _print_conditions(console, dig(resource, "status.conditions", []))
    if info.kind == "VirtualMachine":
        operations = _optional(state, "operations", lambda: _operations_of(state, name))
        _section(console, "Operations", operations, _print_operations)
    if info.kind == "Host":
        vms = _optional(
            state, "VMs", lambda: state.client.list_items("vms", {"fieldSelector": f"status.host={name}"})
        )
        _section(console, "VMs", vms, _print_vms)
        print_use(console, state, name)
        if dig(resource, "status.resource_state", "Enabled") not in ("Enabled", "Disabled"):
            maintenance = _optional(
                state, "maintenance", lambda: state.client.get_path(f"/v1/hosts/{name}/maintenance")
            )
            if maintenance is not None:
                console.print()
                print_maintenance(console, maintenance)
    events = _optional(
        state, "events", lambda: state.client.events(kind=info.kind, name=name, limit=DESCRIBE_EVENT_LIMIT)
    )
    _section(
        console, "Events", sorted_events(events)[-DESCRIBE_EVENT_LIMIT:] if events else events, _print_events
    )


def _optional(state: CliState, what: str, fetch: Callable[[], Any]) -> Any:
    """``fetch()``, or None (and a note on stderr) when the server refuses it: describe still
    shows the rest, e.g. to a token that may read the VM but not its events."""
    try:
        return fetch()
    except ApiError as error:
        state.err_console.print(
            Text(f"({what} unavailable: {error.reason}: {error.message})", style="yellow")
        )
        return None


def _section(
    console: Console, title: str, items: Sequence[JsonObject] | None, show: Callable[[Console, Any], None]
) -> None:
    if items is None:
        return
    console.print()
    if not items:
        console.print(f"{title}: <none>")
        return
    console.print(Text(f"{title}:", style="bold"))
    show(console, items)


def _without_empty_values(value: Any) -> Any:
    """Drop nulls and empty strings, lists and maps: describe shows what is set."""
    if isinstance(value, dict):
        cleaned = {k: _without_empty_values(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_without_empty_values(v) for v in value]
    return value


def _print_object(console: Console, kind: KindInfo, resource: JsonObject) -> None:
    import yaml  # here, not at the top: every command imports this module (issue 39)

    """The resource as YAML, without its conditions (they get a table of their own)."""
    status = dict(dig(resource, "status", {}))
    status.pop("conditions", None)
    summary = _without_empty_values(
        {
            "kind": resource.get("kind", kind.kind),
            "metadata": resource.get("metadata", {}),
            "spec": resource.get("spec", {}),
            "status": status,
        }
    )
    console.print(Text(yaml.safe_dump(summary, sort_keys=False, allow_unicode=True).rstrip()))


def _print_conditions(console: Console, conditions: Any) -> None:
    console.print()
    if not conditions:
        console.print("Conditions: <none>")
        return
    console.print(Text("Conditions:", style="bold"))
    table = new_table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"])
    for condition in conditions:
        table.add_row(
            cell_text(condition.get("type")),
            styled(condition.get("status")),
            cell_text(condition.get("reason")),
            age(condition.get("last_transition_time")),
            cell_text(condition.get("message")),
        )
    print_table(console, table)


def _operations_of(state: CliState, vm: str) -> list[JsonObject]:
    """The VM's newest operations, oldest first."""
    items = state.client.list_items("operations", {"fieldSelector": f"spec.vm={vm}"})
    items.sort(key=lambda op: str(dig(op, "metadata.created_at", "")))
    return items[-DESCRIBE_OPERATION_LIMIT:]


def _print_operations(console: Console, operations: Sequence[JsonObject]) -> None:
    table = new_table(["NAME", "TYPE", "PHASE", "STEP", "AGE", "MESSAGE"])
    for op in operations:
        table.add_row(
            cell_text(dig(op, "metadata.name")),
            cell_text(dig(op, "spec.type")),
            styled(dig(op, "status.phase", "Pending")),
            cell_text(dig(op, "status.step")),
            age(dig(op, "metadata.created_at")),
            cell_text(dig(op, "status.message")),
        )
    print_table(console, table)


def _print_vms(console: Console, vms: Sequence[JsonObject]) -> None:
    table = new_table(["NAME", "PHASE", "POLICY", "CPU", "MEMORY"])
    for vm in sorted(vms, key=lambda v: str(dig(v, "metadata.name", ""))):
        table.add_row(
            cell_text(dig(vm, "metadata.name")),
            styled(dig(vm, "status.phase")),
            cell_text(dig(vm, "spec.run_policy")),
            cell_text(dig(vm, "spec.cpu")),
            format_mib(dig(vm, "spec.memory_mib")),
        )
    print_table(console, table)


def _print_events(console: Console, events: Sequence[JsonObject]) -> None:
    print_events(console, events, with_object=False)
