"""A host's real use beside its allocation: ``get hosts -o wide`` (columns CPU USE, MEM USE) and
``describe host`` (a "Use now" section), from the usage the leader collects (``/v1/usage/hosts``,
``/v1/hosts/NAME/usage``). Telemetry, not part of the stored Host: a server that collects none
(another replica, an old server) leaves the columns at "-" and the section out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from virtplane.cli.errors import ApiError, JsonObject
from virtplane.cli.output import dig, format_mib, format_rate

if TYPE_CHECKING:
    from virtplane.cli.context import CliState

USE = "use"
"""The key under which the hosts' items carry their use, for the table's columns only."""


def with_use(state: CliState, hosts: list[JsonObject]) -> list[JsonObject]:
    """``hosts`` with each one's use now (``host["use"]``), where the server has it."""
    try:
        answer = state.client.get_path("/v1/usage/hosts?limit=10000&sort=cpu")
    except ApiError:
        return hosts
    use = {row["name"]: row for row in answer.get("items", [])}
    return [{**host, USE: use.get(dig(host, "metadata.name"))} for host in hosts]


def cpu_use(host: JsonObject) -> str:
    value = dig(host, f"{USE}.cpu_pct")
    return "-" if value is None else f"{value:.0f}%"


def memory_use(host: JsonObject) -> str:
    used, total = dig(host, f"{USE}.memory_used_mib"), dig(host, f"{USE}.memory_total_mib")
    return "-" if used is None else f"{format_mib(round(used))}/{format_mib(round(total or 0))}"


def print_use(console: Console, state: CliState, name: str) -> None:
    """The host's use now under its allocation; nothing when the server has no figure."""
    try:
        current: Any = state.client.get_path(f"/v1/hosts/{name}/usage?since=1m").get("current")
    except ApiError:
        return
    if not current:
        return
    console.print()
    console.print(Text("Use now:", style="bold"))
    load = current.get("load1")
    rows = [
        ("CPU", f"{current['cpu_pct']:.1f}% of its CPUs" if current.get("cpu_pct") is not None else "-"),
        ("Load (1 min)", "-" if load is None else f"{load:.2f}"),
        (
            "Memory",
            f"{format_mib(round(current['memory_used_mib']))} used of {format_mib(round(current['memory_total_mib']))}",
        ),
        (
            "Disk (its VMs)",
            f"read {format_rate(current.get('disk_read_bps'))}, write {format_rate(current.get('disk_write_bps'))}",
        ),
        (
            "Network (its VMs)",
            f"in {format_rate(current.get('net_rx_bps'))}, out {format_rate(current.get('net_tx_bps'))}",
        ),
    ]
    for label, value in rows:
        console.print(f"  {label + ':':<19}{value}")
