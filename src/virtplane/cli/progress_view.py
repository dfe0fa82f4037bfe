"""What ``--wait`` shows: one row per VM with its state in words and how far it has got.

On a terminal the rows are a table that Rich Live redraws in place, with a progress bar
per VM; into a pipe or a file each change is one plain line (``vm/web-1: migrating to
node-2, 40%``), and a row that did not change prints nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group, RenderableType
from rich.text import Text

from virtplane.cli.output import dig, new_table
from virtplane.domain.progress import MoveProgress, ProgressState

if TYPE_CHECKING:
    from rich.live import Live

__all__ = ["Frame", "ProgressView", "Row", "Tone", "move_row", "operation_row"]

BAR_WIDTH = 24


class Tone(StrEnum):
    """Whether a row is still moving, got where it was going, or is stuck: its colour."""

    BUSY = "yellow"
    GOOD = "green"
    BAD = "bold red"


@dataclass(frozen=True)
class Row:
    """One VM (or one object) as ``--wait`` shows it."""

    name: str  # "vm/web-1"
    words: str  # "migrating to node-2"
    tone: Tone = Tone.BUSY
    percent: float | None = None  # None: nothing to measure (a stop, a restore step)
    detail: str = ""  # the server's message, as it sent it
    measured: str = ""  # "pass 3, dirtying 900 MiB/s, 312 MiB left"

    def line(self) -> str:
        """The plain form: ``vm/web-1: migrating to node-2, 40%, pass 3, ... (copying memory)``."""
        text = f"{self.name}: {self.words}"
        if self.percent is not None and self.tone is Tone.BUSY:
            text += f", {self.percent:.0f}%"
        if self.measured:
            text += f", {self.measured}"
        return f"{text} ({self.detail})" if self.detail else text


@dataclass(frozen=True)
class Frame:
    """Everything on the screen at one moment: a title (the host's state...) and the rows."""

    rows: tuple[Row, ...]
    title: str = ""

    def summary(self) -> str:
        """One line for a timeout's message: the title and each row."""
        return "; ".join([*([self.title] if self.title else []), *(row.line() for row in self.rows)])


# --------------------------------------------------------------------------- the words

_MOVE_WORDS: Mapping[ProgressState, tuple[str, Tone]] = {
    ProgressState.PENDING: ("waiting to move", Tone.BUSY),
    ProgressState.WAITING_FOR_SLOT: ("waiting for a free migration slot", Tone.BUSY),
    ProgressState.MIGRATING: ("migrating to {target}", Tone.BUSY),
    ProgressState.RETRYING: ("attempt {attempts} failed, trying another host", Tone.BUSY),
    ProgressState.MIGRATED: ("migrated to {target}", Tone.GOOD),
    ProgressState.FAILED: ("not moved, still running here", Tone.BAD),
    ProgressState.BLOCKED: ("blocked, left untouched", Tone.BAD),
    ProgressState.STOPPING: ("stopping", Tone.BUSY),
    ProgressState.STOPPED: ("stopped by maintenance", Tone.GOOD),
    ProgressState.LEFT: ("not running, left alone", Tone.GOOD),
    ProgressState.RETURNING: ("migrating back to {target}", Tone.BUSY),
    ProgressState.RETURNED: ("back home", Tone.GOOD),
    ProgressState.NOT_RETURNED: ("not moved back", Tone.BAD),
}
"""Each state of a VM's move (domain/progress.py) in words, and whether it is still moving."""

_OPERATION_WORDS: Mapping[str, tuple[str, Tone]] = {
    "Pending": ("waiting to start", Tone.BUSY),
    "InProgress": ("in progress", Tone.BUSY),
    "Completed": ("completed", Tone.GOOD),
    "Failed": ("failed", Tone.BAD),
    "Superseded": ("superseded by another operation", Tone.BAD),
}


def move_row(name: str, raw: Mapping[str, Any] | None) -> Row:
    """A VM's move (a maintenance's per-VM progress, a Migrate operation's progress)."""
    move = MoveProgress.of(raw)
    words, tone = _MOVE_WORDS[move.state]
    percent: float | None = None  # nothing is measured while it waits, stops or is stuck
    if move.state in (ProgressState.MIGRATING, ProgressState.RETURNING):
        percent = move.progress_pct
    elif move.state in (ProgressState.MIGRATED, ProgressState.RETURNED):
        percent = 100.0
    return Row(
        name=name,
        words=words.format(target=move.target or "another host", attempts=move.attempts),
        tone=tone,
        percent=percent,
        detail=move.message,
        measured=measured(move),
    )


def measured(move: MoveProgress) -> str:
    """What the hypervisor measures of the migration under way: its memory pass, the guest's
    dirty rate and the memory left ("" before memory is sent, or when none runs)."""
    if move.state not in (ProgressState.MIGRATING, ProgressState.RETURNING) or move.iteration <= 0:
        return ""
    mode = "post-copy" if move.post_copy else f"pass {move.iteration}"
    return f"{mode}, dirtying {move.dirty_rate_mib_s:.0f} MiB/s, {move.remaining_mib:.0f} MiB left"


def operation_row(operation: Mapping[str, Any]) -> Row:
    """A VM's operation: its move while it migrates, else its phase and step in words."""
    name = f"vm/{dig(operation, 'spec.vm', '?')}"
    phase = str(dig(operation, "status.phase", "Pending"))
    progress = dig(operation, "status.progress", {})
    if phase == "InProgress" and isinstance(progress, Mapping) and "state" in progress:
        return move_row(name, progress)
    words, tone = _OPERATION_WORDS.get(phase, (phase, Tone.BUSY))
    step = dig(operation, "status.step")
    if phase == "InProgress" and step:
        words = f"{words}: {_spaced(str(step))}"
    percent = 100.0 if tone is Tone.GOOD else None
    return Row(
        name=name, words=words, tone=tone, percent=percent, detail=str(dig(operation, "status.message", ""))
    )


def _spaced(step: str) -> str:
    """``EnterMaintenance`` → ``enter maintenance``."""
    return "".join(f" {c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(step))


# --------------------------------------------------------------------------- the display


class ProgressView:
    """Shows successive ``Frame``s: live in place on a terminal, as changed lines elsewhere.

    A context manager: on a terminal the last frame stays on the screen when it ends.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Live | None = None
        self._title = ""
        self._lines: dict[str, str] = {}

    def __enter__(self) -> ProgressView:
        if self.console.is_terminal:
            # Redrawn when a frame comes (auto_refresh off): no thread, nothing drawn twice.
            from rich.live import Live  # a terminal only (issue 39: start-up)

            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def show(self, frame: Frame) -> None:
        if self._live is not None:
            self._live.update(render(frame), refresh=True)
            return
        if frame.title and frame.title != self._title:
            self.console.print(Text(frame.title))
        self._title = frame.title
        for row in frame.rows:
            line = row.line()
            if self._lines.get(row.name) != line:
                self._lines[row.name] = line
                self.console.print(Text(line, style=row.tone.value if row.tone is not Tone.BUSY else ""))


def render(frame: Frame) -> RenderableType:
    """The terminal's table: VM, state in words, a progress bar, the server's message."""
    table = new_table(["VM", "STATE", "PROGRESS", "", "MESSAGE"])
    for row in frame.rows:
        bar: RenderableType = Text("")
        done = "-"
        if row.percent is not None:
            from rich.progress_bar import ProgressBar

            bar = ProgressBar(total=100.0, completed=row.percent, width=BAR_WIDTH)
            done = f"{row.percent:.0f}%"
        message = "; ".join(part for part in (row.measured, row.detail) if part)
        table.add_row(row.name, Text(row.words, style=row.tone.value), bar, done, message or "-")
    if not frame.title:
        return table
    return Group(Text(frame.title, style="bold"), table)
