"""``settings get|set|reset``: the typed, validated knobs of the control plane."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from virtplane.cli.context import state_of
from virtplane.cli.errors import JsonObject
from virtplane.cli.kinds import resolve_kind
from virtplane.cli.output import OutputFormat, dig, print_structured
from virtplane.cli.tables import print_resources

__all__ = ["register"]

SETTING = resolve_kind("setting")
ClusterOption = Annotated[
    str | None,
    typer.Option("--cluster", help="Only for this cluster (settings of scope host).", show_default=False),
]
HostOption = Annotated[
    str | None,
    typer.Option("--host", help="Only for this host (settings of scope host).", show_default=False),
]
KeyArgument = Annotated[
    str,
    typer.Argument(
        help="The setting's key, e.g. host.maintenance.local.storage.strategy.", show_default=False
    ),
]


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def get(
    ctx: typer.Context,
    key: Annotated[
        str | None, typer.Argument(help="One setting; all when omitted.", show_default=False)
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option(
            "--output", "-o", case_sensitive=False, help="table, wide (with descriptions), json or yaml."
        ),
    ] = OutputFormat.TABLE,
) -> None:
    """Show settings: value, default, type (and with -o wide: scope, allowed values, description)."""
    state = state_of(ctx)
    if key is None:
        print_resources(state.console, SETTING, state.client.list_items(SETTING.plural), output)
        return
    setting = state.client.get(SETTING.plural, key)
    if not print_structured(setting, output):
        _print_setting(state.console, setting)


def _print_setting(console: Console, setting: JsonObject) -> None:
    rows = [
        ("Key", dig(setting, "metadata.name")),
        ("Value", _value_text(dig(setting, "spec.value"))),
        ("Default", _value_text(dig(setting, "status.default"))),
        ("Type", dig(setting, "status.type", "-")),
        ("Scope", dig(setting, "status.scope", "-")),
    ]
    allowed = dig(setting, "status.allowed")
    if allowed:
        rows.append(("Allowed", ", ".join(_value_text(v) for v in allowed)))
    for label, field in (("Clusters", "spec.clusters"), ("Hosts", "spec.hosts")):
        overrides = dig(setting, field) or {}
        if overrides:
            rows.append((label, ", ".join(f"{k}={_value_text(v)}" for k, v in sorted(overrides.items()))))
    description = dig(setting, "status.description")
    if description:
        rows.append(("Description", description))
    for label, value in rows:
        console.print(Text.assemble((f"{label + ':':<13}", "bold"), str(value)))


def _scope(cluster: str | None, host: str | None) -> tuple[dict[str, str | int] | None, str, str]:
    """(query parameters, the field holding the value, words for the message)."""
    if cluster is not None and host is not None:
        raise typer.BadParameter("give --cluster or --host, not both")
    if cluster is not None:
        return {"cluster": cluster}, f"spec.clusters.{cluster}", f" for cluster {cluster}"
    if host is not None:
        return {"host": host}, f"spec.hosts.{host}", f" for host {host}"
    return None, "spec.value", ""


def set_(
    ctx: typer.Context,
    key: KeyArgument,
    value: Annotated[
        str, typer.Argument(help="The new value; the server converts it to the setting's type.")
    ],
    cluster: ClusterOption = None,
    host: HostOption = None,
) -> None:
    """Set a setting, or its override for one cluster or host. The server checks the value."""
    state = state_of(ctx)
    params, field, where = _scope(cluster, host)
    updated = state.client.patch(SETTING.plural, key, {"spec": {"value": value}}, params)
    shown = dig(updated, field, value) if updated else value
    state.console.print(Text(f"setting {key}{where} = {_value_text(shown)}"))


def reset(
    ctx: typer.Context, key: KeyArgument, cluster: ClusterOption = None, host: HostOption = None
) -> None:
    """Reset a setting to its default, or drop its override for one cluster or host."""
    state = state_of(ctx)
    params, _, where = _scope(cluster, host)
    response = state.client.delete(SETTING.plural, key, params)
    if params:
        state.console.print(Text(f"setting {key}: the override{where} is removed"))
        return
    default = dig(response, "spec.value", dig(response, "status.default"))
    suffix = f" ({_value_text(default)})" if response else ""
    state.console.print(Text(f"setting {key} reset to its default{suffix}"))


_EPILOG = (
    "Examples:\n"
    "  virtplane settings get\n"
    "  virtplane settings get -o wide\n"
    "  virtplane settings get host.maintenance.local.storage.strategy\n"
    "  virtplane settings set host.maintenance.local.storage.strategy Migration\n"
    "  virtplane settings set host.cpu_allocation_ratio 8 --cluster batch\n"
    "  virtplane settings reset host.cpu_allocation_ratio --host host-1\n"
    "  virtplane settings reset host.maintenance.local.storage.strategy"
)


def register(app: typer.Typer) -> None:
    settings_app = typer.Typer(
        help="Control-plane settings (admin to change).", epilog=_EPILOG, no_args_is_help=True
    )
    settings_app.command("get", epilog=_EPILOG)(get)
    settings_app.command("set", epilog=_EPILOG)(set_)
    settings_app.command("reset", epilog=_EPILOG)(reset)
    app.add_typer(settings_app, name="settings")
