"""What ``--wait`` shows: a live table on a terminal, one plain line per change elsewhere, and
each VM's state in words."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from virtplane.cli.context import CliState
from virtplane.cli.errors import JsonObject
from virtplane.cli.progress_view import Frame, Row, Tone, move_row, operation_row
from virtplane.cli.waiting import wait_for
from virtplane.domain.progress import ProgressState

from .conftest import FastClock


def _state(terminal: bool) -> tuple[CliState, io.StringIO]:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=terminal, width=120, color_system=None)
    return CliState(url="http://unused", token=None, clock=FastClock(), console=console), screen


def _follow(state: CliState, percents: list[float | None]) -> JsonObject:
    seen = iter(percents)

    def fetch() -> JsonObject:
        return {"percent": next(seen)}

    def frame(current: JsonObject) -> Frame:
        percent = current["percent"]
        words, tone = ("migrated", Tone.GOOD) if percent == 100 else ("migrating", Tone.BUSY)
        return Frame(
            rows=(Row("vm/web-1", words, tone, percent), Row("vm/db-1", "stopping")), title="host/h1"
        )

    return wait_for(
        state, what="host/h1", fetch=fetch, frame=frame, is_done=lambda c: c["percent"] == 100, timeout_s=60
    )


def test_outside_a_terminal_each_change_is_one_plain_line() -> None:
    state, screen = _state(terminal=False)

    _follow(state, [None, 10.0, 10.0, 55.0, 100.0])

    assert screen.getvalue().splitlines() == [
        "host/h1",
        "vm/web-1: migrating",
        "vm/db-1: stopping",
        "vm/web-1: migrating, 10%",
        "vm/web-1: migrating, 55%",
        "vm/web-1: migrated",
    ], "a row that did not change prints nothing; no control codes"


def test_on_a_terminal_the_table_is_redrawn_in_place_and_the_last_one_stays() -> None:
    state, screen = _state(terminal=True)

    _follow(state, [10.0, 55.0, 100.0])

    text = screen.getvalue()
    assert text.count("\x1b[1A") >= 2, "Rich Live moved the cursor up to redraw"
    last = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text.rsplit("\x1b[2K", 1)[1])
    rows = [line.split() for line in last.splitlines() if line.strip()]
    assert rows == [
        ["host/h1"],
        ["VM", "STATE", "PROGRESS", "MESSAGE"],
        ["vm/web-1", "migrated", "━" * 24, "100%", "-"],
        ["vm/db-1", "stopping", "-", "-"],
    ]


@pytest.mark.parametrize(
    ("progress", "line"),
    [
        ({"state": "Pending"}, "vm/a: waiting to move"),
        ({"state": "WaitingForSlot", "message": "outbound limit 2 reached"}, "vm/a: waiting for a free migration slot (outbound limit 2 reached)"),
        ({"state": "Migrating", "target": "h2", "progress_pct": 42.4}, "vm/a: migrating to h2, 42%"),
        ({"state": "Retrying", "attempts": 2, "message": "link down"}, "vm/a: attempt 2 failed, trying another host (link down)"),
        ({"state": "Migrated", "target": "h2", "progress_pct": 100}, "vm/a: migrated to h2"),
        ({"state": "Failed", "message": "no target"}, "vm/a: not moved, still running here (no target)"),
        ({"state": "Blocked", "message": "local storage"}, "vm/a: blocked, left untouched (local storage)"),
        ({"state": "Stopping"}, "vm/a: stopping"),
        ({"state": "Stopped"}, "vm/a: stopped by maintenance"),
        ({"state": "Left"}, "vm/a: not running, left alone"),
        ({"state": "Returning", "target": "h1", "progress_pct": 5}, "vm/a: migrating back to h1, 5%"),
        ({"state": "Migrating", "target": "h2", "progress_pct": 60, "iteration": 3, "dirty_rate_mib_s": 912.4, "remaining_mib": 311.6},
         "vm/a: migrating to h2, 60%, pass 3, dirtying 912 MiB/s, 312 MiB left"),
        ({"state": "Migrating", "target": "h2", "progress_pct": 90, "iteration": 7, "post_copy": True, "remaining_mib": 40},
         "vm/a: migrating to h2, 90%, post-copy, dirtying 0 MiB/s, 40 MiB left"),
        ({"state": "Returned"}, "vm/a: back home"),
        ({"state": "NotReturned", "message": "no room"}, "vm/a: not moved back (no room)"),
    ],
)  # fmt: skip
def test_each_move_state_in_words(progress: JsonObject, line: str) -> None:
    assert move_row("vm/a", progress).line() == line


def test_every_move_state_has_words() -> None:
    assert {move_row("vm/a", {"state": s.value}).words for s in ProgressState}, "no KeyError"


@pytest.mark.parametrize(
    ("status", "line"),
    [
        ({"phase": "Pending"}, "vm/web-1: waiting to start"),
        ({"phase": "InProgress", "step": "EnterMaintenance"}, "vm/web-1: in progress: enter maintenance"),
        ({"phase": "InProgress", "progress": {"state": "Migrating", "target": "h2", "progress_pct": 30}},
         "vm/web-1: migrating to h2, 30%"),
        ({"phase": "Completed", "message": "VM web-1 is stopped"}, "vm/web-1: completed (VM web-1 is stopped)"),
        ({"phase": "Failed", "message": "boom"}, "vm/web-1: failed (boom)"),
        ({"phase": "Superseded"}, "vm/web-1: superseded by another operation"),
    ],
)  # fmt: skip
def test_an_operation_in_words(status: JsonObject, line: str) -> None:
    assert operation_row({"spec": {"vm": "web-1"}, "status": status}).line() == line
