"""``virtplane backup verify NAME [--wait]`` (operator): check a VM backup's files on its target
(``POST /v1/backups/NAME/verify``); with --wait, until its ``status.verification`` answers this
request, exit 1 if the check failed."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from virtplane.cli.context import state_of
from virtplane.cli.errors import CliError, JsonObject
from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.output import dig
from virtplane.cli.progress_view import Tone
from virtplane.cli.waiting import one_row, wait_for

__all__ = ["verify"]

DEFAULT_TIMEOUT_S = 3600.0
EPILOG = (
    "Examples:\n"
    "  virtplane backup verify web-1-20261207-0200 --wait\n"
    "  virtplane describe backup web-1-20261207-0200    # status.verification"
)


def verify(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The VirtualMachineBackup's name.", show_default=False)],
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Wait for the result; exit 1 if the check failed.")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0,
            help=f"With --wait: seconds to wait at most, then exit {ExitCode.TIMEOUT.value} "
            "(the check goes on in the server).",
        ),
    ] = DEFAULT_TIMEOUT_S,
) -> None:
    """Verify a VM backup: qemu-img check of each file of each disk's chain, and the chain read
    whole against a flattened copy."""
    state = state_of(ctx)
    asked = str(state.client.post(f"/v1/backups/{name}/verify", {})["requested"])
    state.console.print(Text(f"backup/{name}: verification {asked} asked"))
    if not wait:
        return

    def answered(backup: JsonObject) -> bool:
        return dig(backup, "status.verification.requested") == asked and bool(
            dig(backup, "status.verification.result")
        )

    def words(backup: JsonObject) -> tuple[str, Tone]:
        if not answered(backup):
            return "verifying", Tone.BUSY
        ok = dig(backup, "status.verification.result") == "Ok"
        return ("verified" if ok else "failed verification"), (Tone.GOOD if ok else Tone.BAD)

    done = wait_for(
        state,
        what=f"backup/{name}",
        fetch=lambda: state.client.get("backups", name),
        frame=one_row(f"backup/{name}", words),
        is_done=answered,
        timeout_s=timeout,
    )
    message = dig(done, "status.verification.message", "")
    if dig(done, "status.verification.result") != "Ok":
        raise CliError("VerifyFailed", f"backup/{name} failed verification: {message}")
    state.console.print(Text(f"backup/{name} verified: {message}", style="green"))
