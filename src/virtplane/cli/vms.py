"""VM power operations, migration, snapshots and restore: each one a VirtualMachineOperation."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from virtplane.cli import ova, vm_backup, vm_create
from virtplane.cli.bulk import run_on_selection
from virtplane.cli.completion import complete_vm
from virtplane.cli.context import CliState, state_of
from virtplane.cli.errors import CliError, JsonObject
from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.kinds import resolve_kind
from virtplane.cli.output import dig, print_yaml
from virtplane.cli.progress_view import Tone
from virtplane.cli.resources import selector_params
from virtplane.cli.waiting import follow_operation, one_row, wait_for, wait_for_operation
from virtplane.domain.api_version import API_VERSION
from virtplane.domain.names import generated_name, random_suffix
from virtplane.domain.vocabulary import RestoreMode, restore_mode_meaning

__all__ = ["operation_name", "register"]

VM_KIND = resolve_kind("vm")

DEFAULT_TIMEOUT_S = 600.0


def operation_name(vm: str, operation_type: str) -> str:
    return generated_name(vm, operation_type.lower(), random_suffix())


VMArgument = Annotated[
    str, typer.Argument(help="The VM's name.", show_default=False, autocompletion=complete_vm)
]
WaitOption = Annotated[
    bool, typer.Option("--wait", "-w", help="Follow the operation until it ends; exit 1 unless it Completed.")
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=0,
        help=f"With --wait: seconds to wait at most, then exit {ExitCode.TIMEOUT.value} "
        "(the operation goes on in the server).",
    ),
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Power off / reset at once instead of asking the guest.")
]


def create_operation(
    state: CliState,
    vm: str,
    operation_type: str,
    *,
    force: bool = False,
    restore: JsonObject | None = None,
    migrate: JsonObject | None = None,
) -> str:
    """Submit a VirtualMachineOperation; return its generated name."""
    name = operation_name(vm, operation_type)
    spec: JsonObject = {"vm": vm, "type": operation_type, "force": force}
    if restore is not None:
        spec["restore"] = restore
    if migrate is not None:
        spec["migrate"] = migrate
    state.client.create(
        "operations",
        {
            "apiVersion": API_VERSION,
            "kind": "VirtualMachineOperation",
            "metadata": {"name": name},
            "spec": spec,
        },
    )
    state.console.print(Text(f"operation/{name} created ({operation_type} vm/{vm})"))
    return name


def _run(
    state: CliState,
    vm: str,
    operation_type: str,
    *,
    wait: bool,
    timeout: float,
    force: bool = False,
    migrate: JsonObject | None = None,
) -> None:
    name = create_operation(state, vm, operation_type, force=force, migrate=migrate)
    if wait:
        wait_for_operation(state, name, timeout)


OptionalVMArgument = Annotated[
    str | None,
    typer.Argument(
        help="The VM's name (or select VMs with -l / --field-selector).",
        show_default=False,
        autocompletion=complete_vm,
    ),
]
SelectorOption = Annotated[
    list[str] | None,
    typer.Option(
        "--selector",
        "-l",
        help="Every VM with these labels (app=web, 'tier in (a,b)', ...): one operation each.",
        show_default=False,
    ),
]
FieldSelectorOption = Annotated[
    list[str] | None,
    typer.Option(
        "--field-selector",
        help="Every VM with these fields (status.host=node-1, status.phase=Running, spec.run_policy=Manual).",
        show_default=False,
    ),
]


def _power(
    state: CliState,
    vm: str | None,
    operation_type: str,
    selectors: tuple[list[str] | None, list[str] | None],
    *,
    force: bool,
    wait: bool,
    timeout: float,
) -> None:
    labels, fields = selectors
    if vm is not None and (labels or fields):
        raise typer.BadParameter("name one VM or select VMs, not both", param_hint="--selector")
    if vm is not None:
        _run(state, vm, operation_type, force=force, wait=wait, timeout=timeout)
        return
    if not labels and not fields:
        raise typer.BadParameter("name a VM, or select VMs with -l / --field-selector", param_hint="VM")
    run_on_selection(
        state, operation_type, selector_params(VM_KIND, labels or [], fields or []), force, wait, timeout
    )


def start(
    ctx: typer.Context,
    vm: OptionalVMArgument = None,
    selector: SelectorOption = None,
    field_selector: FieldSelectorOption = None,
    force: ForceOption = False,
    wait: WaitOption = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Start a stopped VM, or every VM selected (run policies Manual and AlwaysOnUnlessStoppedManually)."""
    _power(state_of(ctx), vm, "Start", (selector, field_selector), force=force, wait=wait, timeout=timeout)


def stop(
    ctx: typer.Context,
    vm: OptionalVMArgument = None,
    selector: SelectorOption = None,
    field_selector: FieldSelectorOption = None,
    force: ForceOption = False,
    wait: WaitOption = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Stop a VM, or every VM selected: graceful within its termination grace period, then forced
    (--force: at once).

    With AlwaysOnUnlessStoppedManually it stays stopped until a Start.
    """
    _power(state_of(ctx), vm, "Stop", (selector, field_selector), force=force, wait=wait, timeout=timeout)


def restart(
    ctx: typer.Context,
    vm: OptionalVMArgument = None,
    selector: SelectorOption = None,
    field_selector: FieldSelectorOption = None,
    force: ForceOption = False,
    wait: WaitOption = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Restart a running VM, or every VM selected."""
    _power(state_of(ctx), vm, "Restart", (selector, field_selector), force=force, wait=wait, timeout=timeout)


def migrate(
    ctx: typer.Context,
    vm: VMArgument,
    to: Annotated[
        str | None,
        typer.Option("--to", help="Target host; default: the scheduler picks one.", show_default=False),
    ] = None,
    wait: WaitOption = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    force: Annotated[
        bool,
        typer.Option("--force", help="Admin only: move it even if that breaks a required placement rule."),
    ] = False,
) -> None:
    """Live-migrate a running VM to another host. A failed migration leaves it running where it was."""
    _run(
        state_of(ctx),
        vm,
        "Migrate",
        migrate={"target_host": to} if to else None,
        force=force,
        wait=wait,
        timeout=timeout,
    )


def evict(
    ctx: typer.Context,
    vm: VMArgument,
    wait: WaitOption = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Move a running VM off its host (live migration to a host the scheduler picks)."""
    _run(state_of(ctx), vm, "Evict", wait=wait, timeout=timeout)


def snapshot_create(
    ctx: typer.Context,
    vm: VMArgument,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Snapshot name; default <vm>-snap-<random>.", show_default=False),
    ] = None,
    with_memory: Annotated[
        bool, typer.Option("--with-memory", help="Also save a running VM's memory.")
    ] = False,
    required_consistency: Annotated[
        bool,
        typer.Option(
            "--required-consistency", help="Snapshot a running VM only with memory or while it is paused."
        ),
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Wait until Ready; exit 1 if it Failed.")
    ] = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Snapshot a VM: its spec, labels, annotations, every disk, and optionally memory."""
    state = state_of(ctx)
    snapshot_name = name or generated_name(vm, "snap", random_suffix())
    state.client.create(
        "snapshots",
        {
            "apiVersion": API_VERSION,
            "kind": "VirtualMachineSnapshot",
            "metadata": {"name": snapshot_name},
            "spec": {"vm": vm, "with_memory": with_memory, "required_consistency": required_consistency},
        },
    )
    state.console.print(Text(f"snapshot/{snapshot_name} created (vm/{vm})"))
    if not wait:
        return
    snapshot = wait_for(
        state,
        what=f"snapshot/{snapshot_name}",
        fetch=lambda: state.client.get("snapshots", snapshot_name),
        frame=one_row(f"snapshot/{snapshot_name}", _snapshot_words),
        is_done=lambda s: dig(s, "status.phase") in ("Ready", "Failed"),
        timeout_s=timeout,
    )
    if dig(snapshot, "status.phase") == "Failed":
        raise CliError(
            "SnapshotFailed",
            f"snapshot/{snapshot_name} failed: {dig(snapshot, 'status.message', 'no message')}",
        )
    state.console.print(Text(f"snapshot/{snapshot_name} ready", style="green"))


_SNAPSHOT_WORDS = {
    "Pending": ("waiting to start", Tone.BUSY),
    "InProgress": ("taking the snapshot", Tone.BUSY),
    "Ready": ("ready", Tone.GOOD),
    "Failed": ("failed", Tone.BAD),
}


def _snapshot_words(snapshot: JsonObject) -> tuple[str, Tone]:
    phase = str(dig(snapshot, "status.phase", "Pending"))
    return _SNAPSHOT_WORDS.get(phase, (phase, Tone.BUSY))


def restore(
    ctx: typer.Context,
    vm: VMArgument,
    snapshot: Annotated[
        str | None, typer.Option("--snapshot", "-s", help="The snapshot to restore.", show_default=False)
    ] = None,
    backup: Annotated[
        str | None,
        typer.Option(
            "--backup", "-b", help="The backup to restore (full or incremental).", show_default=False
        ),
    ] = None,
    disks: Annotated[
        list[str] | None,
        typer.Option(
            "--disk",
            help="With --backup: only this Volume (repeat for more); the VM's spec stays.",
            show_default=False,
        ),
    ] = None,
    mode: Annotated[
        RestoreMode,
        typer.Option(
            "--mode",
            case_sensitive=False,
            help=" ".join(f"{m.value}: {restore_mode_meaning(m)}." for m in RestoreMode),
        ),
    ] = RestoreMode.STRICT,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="The same as --mode DryRun.")] = False,
    new: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="With --backup: a new VM of this name instead (new MACs and addresses).",
            show_default=False,
        ),
    ] = None,
    pool: Annotated[
        str | None, typer.Option("--pool", help="With --as: the pool for its disks.", show_default=False)
    ] = None,
    start: Annotated[
        bool, typer.Option("--start", help="With --as: start it (else it stays Stopped).")
    ] = False,
    wait: WaitOption = False,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Restore a VM from a snapshot or a backup: disks, spec, labels and annotations.

    The VM comes back in the power state it had before the restore (AlwaysOff stays off,
    AlwaysOn runs). DryRun always waits and prints its report.
    """
    state = state_of(ctx)
    if (snapshot is None) == (backup is None):
        raise typer.BadParameter("name one source: --snapshot or --backup")
    if new is not None:
        if backup is None:
            raise typer.BadParameter("--as makes a new VM from a backup: name it with --backup")
        vm_backup.restore_as_new(state, backup, new, pool, start)
        return
    mode = RestoreMode.DRY_RUN if dry_run else mode
    source = {"snapshot": snapshot} if snapshot is not None else {"backup": backup, "disks": disks or []}
    name = create_operation(state, vm, "Restore", restore={**source, "mode": mode.value})
    if mode is RestoreMode.DRY_RUN:
        _print_dry_run_report(state, name, timeout)
    elif wait:
        wait_for_operation(state, name, timeout)


def _print_dry_run_report(state: CliState, name: str, timeout: float) -> None:
    operation = follow_operation(state, name, timeout)
    state.console.print(Text("Dry-run report:", style="bold"))
    progress = dig(operation, "status.progress", {})
    if progress:
        state.console.file.flush()
        print_yaml(progress)
    message = dig(operation, "status.message")
    if message:
        state.console.print(Text(str(message)))
    if dig(operation, "status.phase") != "Completed":
        reason = dig(operation, "status.reason") or dig(operation, "status.phase")
        raise CliError(str(reason), f"the restore would fail: {message or 'see the report above'}")


_VM_EPILOG = (
    "Examples:\n"
    "  virtplane vm stop web-1 --wait\n"
    "  virtplane vm stop -l app=web --wait\n"
    "  virtplane vm start --field-selector status.host=node-1,status.phase=Stopped\n"
    "  virtplane vm start web-1 --wait --timeout 120\n"
    "  virtplane vm restart db-1 --force\n"
    "  virtplane vm migrate web-1 --to node-2 --wait\n"
    "  virtplane vm evict web-1"
)
_SNAPSHOT_EPILOG = (
    "Examples:\n"
    "  virtplane snapshot create web-1 --wait\n"
    "  virtplane snapshot create web-1 --name web-1-before-upgrade --with-memory"
)
_RESTORE_EPILOG = (
    "Examples:\n"
    "  virtplane restore web-1 --snapshot web-1-before-upgrade --mode DryRun\n"
    "  virtplane restore web-1 --snapshot web-1-before-upgrade --wait\n"
    "  virtplane restore web-1 -s web-1-snap-x1y2z --mode BestEffort --wait\n"
    "  virtplane vm restore web-1 --backup web-1-backup-x1y2z --dry-run\n"
    "  virtplane vm restore web-1 --backup web-1-backup-x1y2z --disk web-1-data --wait\n"
    "  virtplane vm restore web-1 --backup web-1-backup-x1y2z --as web-1-copy --start"
)


def register(app: typer.Typer) -> None:
    vm_app = typer.Typer(
        help="Create VMs (from flags or a template); power operations and migration (each a VirtualMachineOperation).",
        epilog=_VM_EPILOG,
        no_args_is_help=True,
    )
    for command in (start, stop, restart, migrate, evict):
        vm_app.command(epilog=_VM_EPILOG)(command)
    vm_app.command("restore", epilog=_RESTORE_EPILOG)(restore)
    vm_create.register(vm_app)
    ova.register(vm_app)
    vm_backup.register(vm_app)
    app.add_typer(vm_app, name="vm")

    snapshot_app = typer.Typer(help="Snapshots of VMs.", epilog=_SNAPSHOT_EPILOG, no_args_is_help=True)
    snapshot_app.command("create", epilog=_SNAPSHOT_EPILOG)(snapshot_create)
    app.add_typer(snapshot_app, name="snapshot")

    app.command(epilog=_RESTORE_EPILOG)(restore)
