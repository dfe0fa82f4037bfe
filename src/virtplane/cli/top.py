"""``virtplane top vms|hosts``: who uses the CPU, memory, disks and network now, busiest first.

The server sorts and cuts (``GET /v1/usage/vms``, ``/v1/usage/hosts``); ``--watch`` redraws at
the collection interval until Ctrl-C (rich's live display, imported only then).
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from virtplane.cli.context import state_of
from virtplane.cli.output import OutputFormat, format_rate, print_structured


class Kind(StrEnum):
    VMS = "vms"
    HOSTS = "hosts"


class Sort(StrEnum):
    CPU = "cpu"
    MEMORY = "memory"
    DISK = "disk"
    NET = "net"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _sum(row: dict[str, Any], *keys: str) -> float | None:
    known = [row[key] for key in keys if row.get(key) is not None]
    return sum(known) if known else None


def table(kind: Kind, answer: dict[str, Any]) -> Table:
    title = f"{kind.value}: {len(answer['items'])} of {answer['total']}, by {answer['sort']}"
    grid = Table(title=title, title_justify="left", box=None, header_style="bold")
    if kind is Kind.VMS:
        for column in ("NAME", "HOST", "CPU %", "MEM MiB", "DISK R", "DISK W", "NET RX", "NET TX"):
            grid.add_column(column, justify="left" if column in ("NAME", "HOST") else "right")
        for row in answer["items"]:
            grid.add_row(
                row["name"],
                row["host"],
                _num(row["cpu_pct"], ".1f"),
                _num(row["memory_used_mib"], ".0f"),
                format_rate(row["disk_read_bps"]),
                format_rate(row["disk_write_bps"]),
                format_rate(row["net_rx_bps"]),
                format_rate(row["net_tx_bps"]),
            )
        return grid
    for column in ("NAME", "CPU %", "LOAD", "MEM USED", "MEM TOTAL", "DISK R+W", "NET RX+TX"):
        grid.add_column(column, justify="left" if column == "NAME" else "right")
    for row in answer["items"]:
        grid.add_row(
            row["name"],
            _num(row["cpu_pct"], ".1f"),
            _num(row["load1"], ".2f"),
            _num(row["memory_used_mib"], ".0f"),
            _num(row["memory_total_mib"], ".0f"),
            format_rate(_sum(row, "disk_read_bps", "disk_write_bps")),
            format_rate(_sum(row, "net_rx_bps", "net_tx_bps")),
        )
    return grid


def top(
    ctx: typer.Context,
    kind: Annotated[Kind, typer.Argument(help="vms or hosts.", case_sensitive=False, show_default=False)],
    sort: Annotated[
        Sort, typer.Option("--sort", case_sensitive=False, help="cpu, memory, disk or net.")
    ] = Sort.CPU,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10000, help="How many rows.")] = 20,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Redraw at each collection until Ctrl-C.")
    ] = False,
    output: Annotated[
        OutputFormat, typer.Option("--output", "-o", case_sensitive=False, help="table, json or yaml.")
    ] = OutputFormat.TABLE,
) -> None:
    """What the running VMs (or the hosts) use now, busiest first."""
    state = state_of(ctx)
    path = f"/v1/usage/{kind.value}?sort={sort.value}&limit={limit}"
    answer = state.client.get_path(path)
    if not watch:
        if not print_structured(answer, output):
            state.console.print(table(kind, answer))
        return
    _watch(state.console, lambda: state.client.get_path(path), kind, float(answer["interval_s"]))


def _watch(console: Console, fetch: Any, kind: Kind, interval_s: float) -> None:
    from rich.live import Live  # only for --watch: the plain command stays quick to start

    with Live(table(kind, fetch()), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval_s)  # the figures change once a collection round
                live.update(table(kind, fetch()), refresh=True)
        except KeyboardInterrupt:
            pass


_EPILOG = (
    "Examples:\n"
    "  virtplane top vms                      # the busiest CPUs\n"
    "  virtplane top vms --sort disk --limit 5\n"
    "  virtplane top hosts --sort memory --watch"
)


def register(app: typer.Typer) -> None:
    app.command("top", epilog=_EPILOG)(top)
