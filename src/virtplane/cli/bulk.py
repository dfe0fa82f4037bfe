"""``virtplane vm stop -l app=web --wait``: one request for every VM a selector matches.

The server creates one operation per VM (``POST /v1/vms/actions/<type>``) and says, per VM,
which operation it created or why it refused; ``--wait`` then follows all of them through
one watch of the label ``virtplane.io/batch`` the server put on them.
"""

from __future__ import annotations

from rich.text import Text

from virtplane.cli.context import CliState
from virtplane.cli.errors import CliError, JsonObject
from virtplane.cli.output import dig
from virtplane.cli.progress_view import operation_row
from virtplane.cli.waiting import OPERATION_END_PHASES
from virtplane.cli.watching import watch_operations
from virtplane.domain.names import BATCH_LABEL

__all__ = ["run_on_selection"]


def run_on_selection(
    state: CliState,
    operation_type: str,
    params: dict[str, str | int],
    force: bool,
    wait: bool,
    timeout_s: float,
) -> None:
    """Create the operations, print each VM's outcome, and with ``wait`` follow them to their end.

    Raises ``CliError`` (exit 1) when a VM was refused or an operation did not complete.
    """
    result = state.client.post(f"/v1/vms/actions/{operation_type.lower()}", {**params, "force": force})
    items: list[JsonObject] = [i for i in result.get("items") or [] if isinstance(i, dict)]
    if not items:
        state.console.print("No VMs match the selector.")
        return
    created: dict[str, str] = {}  # operation -> vm
    refused = 0
    for outcome in items:
        vm, operation = outcome.get("vm"), outcome.get("operation")
        if operation:
            created[str(operation)] = str(vm)
            state.console.print(Text(f"operation/{operation} created ({operation_type} vm/{vm})"))
        else:
            refused += 1
            state.console.print(
                Text(f"vm/{vm}: refused ({outcome.get('reason')}): {outcome.get('message')}", style="yellow")
            )
    failed = 0
    if wait and created:
        batch = str(dig(result, "metadata.batch", ""))
        latest = watch_operations(
            state,
            f"{BATCH_LABEL}={batch}",
            set(created),
            done=lambda op: dig(op, "status.phase") in OPERATION_END_PHASES,
            row=operation_row,
            timeout_s=timeout_s,
        )
        failed = sum(1 for op in latest.values() if dig(op, "status.phase") != "Completed")
    done = "completed" if wait else "created"
    summary = f"{operation_type}: {len(created) - failed} of {len(items)} VM(s) {done}"
    if refused or failed:
        raise CliError(
            "NotAllDone", f"{summary}; {refused} refused" + (f", {failed} did not complete" if failed else "")
        )
    state.console.print(Text(summary, style="green"))
