"""``--wait``: poll a resource until it reaches an end state, showing each change on the way.

What is shown is a ``Frame`` (``progress_view``): a live table on a terminal, one plain line
per change elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text

from virtplane.cli.context import CliState
from virtplane.cli.errors import CliError, JsonObject, WaitTimedOut
from virtplane.cli.output import dig
from virtplane.cli.progress_view import Frame, ProgressView, Row, Tone, operation_row

__all__ = [
    "OPERATION_END_PHASES",
    "POLL_INTERVAL_S",
    "follow_operation",
    "one_row",
    "wait_for",
    "wait_for_operation",
]

POLL_INTERVAL_S = 0.5
OPERATION_END_PHASES = frozenset({"Completed", "Failed", "Superseded"})


def wait_for(
    state: CliState,
    *,
    what: str,
    fetch: Callable[[], JsonObject],
    frame: Callable[[JsonObject], Frame],
    is_done: Callable[[JsonObject], bool],
    timeout_s: float,
) -> JsonObject:
    """Poll ``fetch`` until ``is_done``; show the ``frame`` of every state; return the last one.

    Raises ``CliError`` (reason ``Timeout``) after ``timeout_s``.
    """
    deadline = state.clock.monotonic() + timeout_s
    with ProgressView(state.console) as view:
        while True:
            current = fetch()
            shown = frame(current)
            view.show(shown)
            if is_done(current):
                return current
            if state.clock.monotonic() >= deadline:
                raise WaitTimedOut(
                    f"gave up waiting for {what} after {timeout_s:g}s; last seen: {shown.summary()}"
                )
            state.clock.sleep(POLL_INTERVAL_S)


def one_row(name: str, words: Callable[[JsonObject], tuple[str, Tone]]) -> Callable[[JsonObject], Frame]:
    """A frame of one row ``name`` whose words (and tone) come from the fetched object."""

    def frame(current: JsonObject) -> Frame:
        text, tone = words(current)
        return Frame(rows=(Row(name, text, tone, detail=str(dig(current, "status.message", ""))),))

    return frame


def follow_operation(state: CliState, name: str, timeout_s: float) -> JsonObject:
    """Show an operation's VM row until the operation ends; return its last state."""
    return wait_for(
        state,
        what=f"operation/{name}",
        fetch=lambda: state.client.get("operations", name),
        frame=lambda op: Frame(rows=(operation_row(op),)),
        is_done=lambda op: dig(op, "status.phase") in OPERATION_END_PHASES,
        timeout_s=timeout_s,
    )


def wait_for_operation(state: CliState, name: str, timeout_s: float) -> JsonObject:
    """Follow an operation to its end; raise ``CliError`` unless it Completed."""
    operation = follow_operation(state, name, timeout_s)
    phase = dig(operation, "status.phase")
    if phase != "Completed":
        reason: Any = dig(operation, "status.reason") or phase
        message = dig(operation, "status.message") or "no message"
        raise CliError(str(reason), f"operation/{name} {str(phase).lower()}: {message}")
    state.console.print(Text(f"operation/{name} completed", style="green"))
    return operation
