"""Host commands (maintenance, enable/disable) and simulator faults."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from virtplane.cli.completion import complete_host
from virtplane.cli.context import CliState, state_of
from virtplane.cli.errors import ApiError, CliError, JsonObject
from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.maintenance_view import maintenance_frame, print_maintenance
from virtplane.cli.output import OutputFormat, dig, print_structured
from virtplane.cli.waiting import wait_for
from virtplane.domain.vocabulary import DOMAIN_FAULTS, FaultKind, MaintenanceStrategy, strategy_meaning

__all__ = ["register"]

DEFAULT_TIMEOUT_S = 1800.0
MAINTENANCE_DONE = "Maintenance"
MAINTENANCE_FAILED = "ErrorInMaintenance"


HostArgument = Annotated[
    str, typer.Argument(help="The host's name.", show_default=False, autocompletion=complete_host)
]
OutputOption = Annotated[
    OutputFormat, typer.Option("--output", "-o", case_sensitive=False, help="table, json or yaml.")
]


# --------------------------------------------------------------------------- maintenance


def maintenance_enable(
    ctx: typer.Context,
    host: HostArgument,
    strategy: Annotated[
        MaintenanceStrategy | None,
        typer.Option(
            "--strategy",
            case_sensitive=False,
            help="For running VMs with local disks: "
            + "; ".join(f"{s.value}: {strategy_meaning(s)}" for s in MaintenanceStrategy)
            + ". Default: the setting host.maintenance.local.storage.strategy.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only compute and print the plan.")] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", "-w", help="Follow the drain until Maintenance; exit 1 on ErrorInMaintenance."
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0,
            help=f"With --wait: seconds at most, then exit {ExitCode.TIMEOUT.value} (the drain goes on).",
        ),
    ] = DEFAULT_TIMEOUT_S,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Put a host into maintenance: move or stop its VMs, then hold it empty.

    VMs stopped by maintenance are started again when it is cancelled. Asking again
    retries a host in ErrorInMaintenance.
    """
    state = state_of(ctx)
    maintenance = state.client.post(
        f"/v1/hosts/{host}/maintenance",
        {"strategy": strategy.value if strategy else None, "dry_run": dry_run},
    )
    if not print_structured(maintenance, output):
        print_maintenance(state.console, maintenance)
    if wait and not dry_run:
        _wait_for_maintenance(state, host, timeout)


def _wait_for_maintenance(state: CliState, host: str, timeout: float) -> None:
    def fetch() -> JsonObject:
        """``{"host": <Host>, "maintenance": <maintenance or {}>}``."""
        snapshot: JsonObject = {"host": state.client.get("hosts", host), "maintenance": {}}
        try:
            snapshot["maintenance"] = state.client.get_path(f"/v1/hosts/{host}/maintenance")
        except ApiError as error:
            if error.status_code != 404:
                raise
        return snapshot

    final = wait_for(
        state,
        what=f"host/{host}",
        fetch=fetch,
        frame=maintenance_frame,
        is_done=lambda s: dig(s, "host.status.resource_state") in (MAINTENANCE_DONE, MAINTENANCE_FAILED),
        timeout_s=timeout,
    )
    if dig(final, "host.status.resource_state") == MAINTENANCE_FAILED:
        message = (
            dig(final, "host.status.message")
            or dig(final, "maintenance.message")
            or "see `virtplane host maintenance show`"
        )
        raise CliError(MAINTENANCE_FAILED, f"host/{host}: {message}")
    state.console.print(Text(f"host/{host} is in Maintenance", style="green"))


def maintenance_cancel(ctx: typer.Context, host: HostArgument) -> None:
    """Cancel maintenance: stop scheduling moves, return the host to Enabled, restart the VMs it stopped."""
    state = state_of(ctx)
    state.client.delete_path(f"/v1/hosts/{host}/maintenance")
    state.console.print(Text(f"maintenance of host/{host} cancelled"))


def maintenance_show(
    ctx: typer.Context, host: HostArgument, output: OutputOption = OutputFormat.TABLE
) -> None:
    """Show a host's maintenance: phase, plan and per-VM progress."""
    state = state_of(ctx)
    maintenance = state.client.get_path(f"/v1/hosts/{host}/maintenance")
    if not print_structured(maintenance, output):
        print_maintenance(state.console, maintenance)


# --------------------------------------------------------------------------- enable / disable


def _set_enabled(state: CliState, host: str, enabled: bool) -> None:
    state.client.patch("hosts", host, {"spec": {"enabled": enabled}})
    state.console.print(Text(f"host/{host} {'enabled' if enabled else 'disabled'}"))


def enable(ctx: typer.Context, host: HostArgument) -> None:
    """Let a disabled host receive VMs again."""
    _set_enabled(state_of(ctx), host, True)


def disable(ctx: typer.Context, host: HostArgument) -> None:
    """Stop placing VMs on a host; the VMs it runs stay where they are."""
    _set_enabled(state_of(ctx), host, False)


# --------------------------------------------------------------------------- sim


def _fault_target(words: list[str]) -> tuple[str | None, FaultKind]:
    """``[HOST] KIND`` → (host or None, kind)."""
    if len(words) not in (1, 2):
        raise typer.BadParameter("give the fault kind, optionally after the host: [HOST] KIND")
    kind = words[-1].lower()
    try:
        return (words[0] if len(words) == 2 else None), FaultKind(kind)
    except ValueError:
        allowed = ", ".join(k.value for k in FaultKind)
        raise typer.BadParameter(f"{words[-1]!r} is not a fault kind: one of {allowed}") from None


def fault(
    ctx: typer.Context,
    target: Annotated[
        list[str],
        typer.Argument(
            metavar="[HOST] KIND",
            help="What to inject, and where: with --vm the VM's own host is found, so HOST may be left out.",
            show_default=False,
        ),
    ],
    vm: Annotated[
        str | None, typer.Option("--vm", help="The VM it hits (VM faults).", show_default=False)
    ] = None,
    count: Annotated[int, typer.Option("--count", min=1, help="How many times (fail-start, ...).")] = 1,
) -> None:
    """Inject a fault into a simulated host (admin).

    A fault aimed at a VM (--vm) goes to the host the VM is on, wherever it was placed;
    a named HOST is used only to arm fail-start or migration faults there.
    """
    state = state_of(ctx)
    host, kind = _fault_target(target)
    if vm is not None and (host is None or kind in DOMAIN_FAULTS):
        done = state.client.post(f"/v1/vms/{vm}/faults", {"kind": kind.value, "count": count})
    elif host is None:
        raise typer.BadParameter(f"fault {kind.value} needs a HOST or --vm")
    else:
        done = state.client.post(f"/v1/hosts/{host}/faults", {"kind": kind.value, "vm": vm, "count": count})
    where = str(done.get("host", host))
    note = f" ({vm} runs there, not on {host})" if host and where != host else ""
    on_vm = f" on vm/{vm}" if vm else ""
    times = f" x{count}" if count != 1 else ""
    state.console.print(Text(f"fault {kind.value}{times} injected into host/{where}{on_vm}{note}"))


def load(
    ctx: typer.Context,
    vm: Annotated[str, typer.Argument(help="The VM whose simulated guest is loaded.", show_default=False)],
    cpu: Annotated[float, typer.Option("--cpu", min=0, max=100, help="% of its vCPUs kept busy.")] = 2.0,
    memory: Annotated[float, typer.Option("--memory", min=0, max=100, help="% of its memory in use.")] = 40.0,
    disk_read: Annotated[float, typer.Option("--disk-read", min=0, help="Bytes read per second.")] = 0.0,
    disk_write: Annotated[float, typer.Option("--disk-write", min=0, help="Bytes written per second.")] = 0.0,
    net_rx: Annotated[float, typer.Option("--net-rx", min=0, help="Bytes received per second.")] = 0.0,
    net_tx: Annotated[float, typer.Option("--net-tx", min=0, help="Bytes sent per second.")] = 0.0,
) -> None:
    """Set how busy a VM's simulated guest is (admin): its usage follows (virtplane top)."""
    state = state_of(ctx)
    body = {
        "cpu_pct": cpu,
        "memory_pct": memory,
        "disk_read_bps": disk_read,
        "disk_write_bps": disk_write,
        "net_rx_bps": net_rx,
        "net_tx_bps": net_tx,
    }
    state.client.request("PUT", f"/v1/vms/{vm}/load", body=body)
    state.console.print(Text(f"vm/{vm}: guest load set (cpu {cpu:g}%, memory {memory:g}%)"))


_HOST_EPILOG = (
    "Examples:\n"
    "  virtplane host maintenance enable node-1 --dry-run\n"
    "  virtplane host maintenance enable node-1 --strategy Migration --wait\n"
    "  virtplane host maintenance show node-1\n"
    "  virtplane host maintenance cancel node-1\n"
    "  virtplane host disable node-2"
)
_SIM_EPILOG = (
    "Examples:\n"
    "  virtplane sim fault crash --vm web-1                      # on whichever host runs web-1\n"
    "  virtplane sim fault sim-1 fail-start --vm web-1 --count 3  # its next 3 starts on sim-1 fail\n"
    "  virtplane sim fault sim-2 host-down\n"
    "  virtplane sim load web-1 --cpu 80 --disk-write 5000000  # its guest's usage (virtplane top)"
)


def register(app: typer.Typer) -> None:
    host_app = typer.Typer(help="Host maintenance and scheduling.", epilog=_HOST_EPILOG, no_args_is_help=True)
    maintenance_app = typer.Typer(
        help="Drain a host for maintenance.", epilog=_HOST_EPILOG, no_args_is_help=True
    )
    maintenance_app.command("enable", epilog=_HOST_EPILOG)(maintenance_enable)
    maintenance_app.command("cancel", epilog=_HOST_EPILOG)(maintenance_cancel)
    maintenance_app.command("show", epilog=_HOST_EPILOG)(maintenance_show)
    host_app.add_typer(maintenance_app, name="maintenance")
    host_app.command(epilog=_HOST_EPILOG)(enable)
    host_app.command(epilog=_HOST_EPILOG)(disable)
    app.add_typer(host_app, name="host")

    sim_app = typer.Typer(
        help="The simulated hypervisor (demo and tests).", epilog=_SIM_EPILOG, no_args_is_help=True
    )
    sim_app.command(epilog=_SIM_EPILOG)(fault)
    sim_app.command(epilog=_SIM_EPILOG)(load)
    app.add_typer(sim_app, name="sim")
