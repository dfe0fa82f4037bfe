"""``virtplane vm backup VM --target T``: a VirtualMachineBackup, followed with its progress.

(``virtplane backup -o FILE`` is the store's own backup; this is a VM's.)"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from virtplane.cli.completion import complete_vm
from virtplane.cli.context import CliState, state_of
from virtplane.cli.errors import CliError, JsonObject
from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.output import dig, format_mib
from virtplane.cli.progress_view import Tone
from virtplane.cli.waiting import one_row, wait_for
from virtplane.domain.api_version import API_VERSION
from virtplane.domain.names import generated_name, random_suffix

__all__ = ["backup", "register", "restore_as_new"]

DEFAULT_TIMEOUT_S = 3600.0
EPILOG = (
    "Examples:\n"
    "  virtplane vm backup web-1 --target nightly --wait\n"
    "  virtplane vm backup web-1 --target nightly --full\n"
    "  virtplane get backups\n"
    "  virtplane describe backup web-1-backup-x1y2z"
)


def backup(
    ctx: typer.Context,
    vm: Annotated[str, typer.Argument(help="The VM's name.", show_default=False, autocompletion=complete_vm)],
    target: Annotated[
        str, typer.Option("--target", "-t", help="The BackupTarget to write to.", show_default=False)
    ],
    full: Annotated[
        bool, typer.Option("--full", help="A full backup even where an incremental one could be.")
    ] = False,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Backup name; default <vm>-backup-<random>.", show_default=False),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Show its progress until it ends; exit 1 if it Failed.")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0,
            help=f"With --wait: seconds to wait at most, then exit {ExitCode.TIMEOUT.value} "
            "(the backup goes on in the server).",
        ),
    ] = DEFAULT_TIMEOUT_S,
) -> None:
    """Back up a VM into a backup target: full the first time, then incremental where it can."""
    state = state_of(ctx)
    backup_name = name or generated_name(vm, "backup", random_suffix())
    state.client.create(
        "backups",
        {
            "apiVersion": API_VERSION,
            "kind": "VirtualMachineBackup",
            "metadata": {"name": backup_name},
            "spec": {"vm": vm, "target": target, "full": full},
        },
    )
    state.console.print(Text(f"backup/{backup_name} created (vm/{vm} to backuptarget/{target})"))
    if not wait:
        return
    done = wait_for(
        state,
        what=f"backup/{backup_name}",
        fetch=lambda: state.client.get("backups", backup_name),
        frame=one_row(f"backup/{backup_name}", backup_words),
        is_done=lambda b: dig(b, "status.phase") in ("Succeeded", "Failed"),
        timeout_s=timeout,
    )
    if dig(done, "status.phase") == "Failed":
        raise CliError(
            "BackupFailed", f"backup/{backup_name} failed: {dig(done, 'status.message', 'no message')}"
        )
    state.console.print(
        Text(f"backup/{backup_name} succeeded: {dig(done, 'status.message', '')}", style="green")
    )


def backup_words(current: JsonObject) -> tuple[str, Tone]:
    phase = str(dig(current, "status.phase", "Pending"))
    if phase == "Running":
        total, done = (
            dig(current, "status.total_bytes", 0) or 0,
            dig(current, "status.processed_bytes", 0) or 0,
        )
        mode = str(dig(current, "status.mode", "") or "").lower()
        if not total:
            return f"starting a {mode} backup", Tone.BUSY
        copied = f"{format_mib(done // 2**20)} of {format_mib(total // 2**20)}"
        return f"{mode}: {copied} ({100 * done // total}%)", Tone.BUSY
    words = {"Pending": ("waiting to start", Tone.BUSY), "Succeeded": ("succeeded", Tone.GOOD)}
    return words.get(phase, ("failed", Tone.BAD) if phase == "Failed" else (phase, Tone.BUSY))


def restore_as_new(state: CliState, backup: str, new: str, pool: str | None, start: bool) -> None:
    """A new VM from a backup (``POST /v1/vms/actions/create`` with it): the spec it captured
    with new MACs and addresses, its disks copied from the backup; Stopped unless ``start``."""
    body: JsonObject = {
        "names": [new],
        "backup": backup,
        "run_policy": "AlwaysOnUnlessStoppedManually" if start else "Manual",
    }
    if pool is not None:
        body["pool"] = pool
    answer = state.client.post("/v1/vms/actions/create", body)
    for item in answer.get("items") or []:
        kind = "vm" if dig(item, "kind") == "VirtualMachine" else str(dig(item, "kind", "")).lower()
        state.console.print(Text(f"{kind}/{dig(item, 'metadata.name')} created from backup/{backup}"))


def register(vm_app: typer.Typer) -> None:
    vm_app.command("backup", epilog=EPILOG)(backup)
