"""``--wait``: poll a resource until it reaches an end state, showing each change on the way."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rich.status import Status
from rich.text import Text

from virtplane.cli.client import CliError, JsonObject
from virtplane.cli.context import CliState
from virtplane.cli.output import dig

__all__ = [
    "OPERATION_END_PHASES",
    "POLL_INTERVAL_S",
    "operation_line",
    "wait_for",
    "wait_for_operation",
]

POLL_INTERVAL_S = 0.5
OPERATION_END_PHASES = frozenset({"Completed", "Failed", "Superseded"})


@contextlib.contextmanager
def _spinner(state: CliState, text: str) -> Iterator[Status | None]:
    """A Rich spinner on a terminal; nothing when output goes to a pipe or a file."""
    if not state.console.is_terminal:
        yield None
        return
    with state.console.status(text) as status:
        yield status


def wait_for(
    state: CliState,
    *,
    what: str,
    fetch: Callable[[], JsonObject],
    describe: Callable[[JsonObject], str],
    is_done: Callable[[JsonObject], bool],
    timeout_s: float,
) -> JsonObject:
    """Poll ``fetch`` until ``is_done``; print ``describe`` of every new state; return the last one.

    Raises ``CliError`` (reason ``Timeout``) after ``timeout_s``.
    """
    deadline = state.clock.monotonic() + timeout_s
    last_line: str | None = None
    with _spinner(state, f"Waiting for {what}") as spinner:
        while True:
            current = fetch()
            line = describe(current)
            if line != last_line:
                if spinner is not None:
                    spinner.update(f"{what}: {line}")
                state.console.print(Text(line))
                last_line = line
            if is_done(current):
                return current
            if state.clock.monotonic() >= deadline:
                raise CliError(
                    "Timeout",
                    f"gave up waiting for {what} after {timeout_s:g}s; last seen: {line}",
                )
            state.clock.sleep(POLL_INTERVAL_S)


def operation_line(operation: JsonObject) -> str:
    """``InProgress  step=Migrate  copying memory (60%)``."""
    parts = [str(dig(operation, "status.phase", "Pending"))]
    step = dig(operation, "status.step")
    if step:
        parts.append(f"step={step}")
    message = dig(operation, "status.message")
    if message:
        parts.append(str(message))
    return "  ".join(parts)


def wait_for_operation(state: CliState, name: str, timeout_s: float) -> JsonObject:
    """Follow an operation to its end; raise ``CliError`` unless it Completed."""
    operation = wait_for(
        state,
        what=f"operation/{name}",
        fetch=lambda: state.client.get("operations", name),
        describe=operation_line,
        is_done=lambda op: dig(op, "status.phase") in OPERATION_END_PHASES,
        timeout_s=timeout_s,
    )
    phase = dig(operation, "status.phase")
    if phase != "Completed":
        reason: Any = dig(operation, "status.reason") or phase
        message = dig(operation, "status.message") or "no message"
        raise CliError(str(reason), f"operation/{name} {str(phase).lower()}: {message}")
    state.console.print(Text(f"operation/{name} completed", style="green"))
    return operation
