"""``virtplane rebalance show|plan|apply [--cluster C]``: a cluster's balance and its plan of
live migrations (issue 37), from ``/v1/clusters/NAME/rebalance``.

``show`` (any role): each host's load now, the spread, the plan now and the leader's last
look. ``plan`` (admin, changes nothing): the plan now, as ``POST ...?dryRun`` computes it.
``apply`` (admin): carry the plan out now, as automatic mode would (same limits and pause).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from virtplane.cli.context import state_of
from virtplane.cli.output import OutputFormat, print_structured

__all__ = ["register"]

DEFAULT_CLUSTER = "default"
ClusterOption = Annotated[str, typer.Option("--cluster", "-c", help="The cluster (default: default).")]
OutputOption = Annotated[
    OutputFormat, typer.Option("--output", "-o", case_sensitive=False, help="table, json or yaml.")
]
_EPILOG = (
    "Examples:\n"
    "  virtplane rebalance show\n"
    "  virtplane rebalance plan --cluster rack-2\n"
    "  virtplane rebalance apply --cluster rack-2\n"
    "  virtplane settings set rebalance.mode automatic --cluster rack-2"
)


def _path(cluster: str) -> str:
    return f"/v1/clusters/{cluster}/rebalance"


def print_plan(console: Console, plan: dict[str, Any]) -> None:
    moves = plan.get("moves", [])
    if not moves:
        console.print("No move: the cluster is as even as the minimum gain asks.")
    else:
        console.print(
            f"{len(moves)} move(s): spread (std of host load) {plan['std_before']:.3f} -> {plan['std_after']:.3f}"
        )
        table = Table(box=None, pad_edge=False)
        for column in ("VM", "FROM", "TO", "SPREAD AFTER", "WHY"):
            table.add_column(column)
        for move in moves:
            table.add_row(
                move["vm"], move["source"], move["target"], f"{move['std_after']:.3f}", move["reason"]
            )
        console.print(table)
    for line in plan.get("unrepaired", []):
        console.print(Text(f"unrepaired: {line}", style="yellow"))
    unmovable = plan.get("unmovable", {})
    if unmovable:
        console.print(
            f"{len(unmovable)} VM(s) not considered (e.g. {next(iter(unmovable.items()))[0]}: "
            f"{next(iter(unmovable.values()))})"
        )


def show(
    ctx: typer.Context, cluster: ClusterOption = DEFAULT_CLUSTER, output: OutputOption = OutputFormat.TABLE
) -> None:
    """A cluster's balance now: each host's load, the spread, the plan and the last look."""
    state = state_of(ctx)
    answer = state.client.get_path(_path(cluster))
    if print_structured(answer, output):
        return
    console, balance = state.console, answer["balance"]
    console.print(
        f"cluster {cluster}: mode {answer['mode']}, spread (std) {balance['std']:.3f}, "
        f"max-min {balance['spread']:.3f}, mean load {balance['mean']:.3f}"
    )
    table = Table(box=None, pad_edge=False)
    table.add_column("HOST")
    table.add_column("LOAD", justify="right")
    for host, load in balance["hosts"].items():
        table.add_row(host, f"{load:.3f}")
    console.print(table)
    print_plan(console, answer["plan"])
    last = answer.get("last")
    if last:
        started = ", ".join(last["started"]) or "none"
        paused = f"; paused: {last['paused']}" if last["paused"] else ""
        console.print(f"last look {last['at']} ({last['mode']}): started {started}{paused}")


def plan(
    ctx: typer.Context, cluster: ClusterOption = DEFAULT_CLUSTER, output: OutputOption = OutputFormat.TABLE
) -> None:
    """Plan the cluster's rebalancing now and show it; nothing moves (admin)."""
    state = state_of(ctx)
    answer = state.client.request("POST", _path(cluster), params={"dryRun": "true"})
    if not print_structured(answer, output):
        print_plan(state.console, answer["plan"])


def apply(
    ctx: typer.Context, cluster: ClusterOption = DEFAULT_CLUSTER, output: OutputOption = OutputFormat.TABLE
) -> None:
    """Carry out the cluster's plan now as live migrations, within the limits (admin)."""
    state = state_of(ctx)
    answer = state.client.request("POST", _path(cluster))
    if print_structured(answer, output):
        return
    print_plan(state.console, answer["plan"])
    if answer["paused"]:
        state.console.print(Text(f"paused: {answer['paused']}", style="yellow"))
    state.console.print(f"started: {', '.join(answer['started']) or 'none'}")
    for vm, why in answer["waiting"].items():
        state.console.print(f"  {vm} waits: {why}")


def register(app: typer.Typer) -> None:
    rebalance_app = typer.Typer(
        help="A cluster's balance and its plan of live migrations.", no_args_is_help=True
    )
    rebalance_app.command("show", epilog=_EPILOG)(show)
    rebalance_app.command("plan", epilog=_EPILOG)(plan)
    rebalance_app.command("apply", epilog=_EPILOG)(apply)
    app.add_typer(rebalance_app, name="rebalance")
