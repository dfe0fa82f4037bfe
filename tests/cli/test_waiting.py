"""``wait_for`` on a terminal: a Rich spinner plus one line per change, same result as in a pipe."""

from __future__ import annotations

import io
import re

from rich.console import Console

from virtplane.cli.client import JsonObject
from virtplane.cli.context import CliState
from virtplane.cli.waiting import wait_for

from .conftest import FastClock


def test_wait_for_on_a_terminal_prints_each_change_once() -> None:
    screen = io.StringIO()
    state = CliState(
        url="http://unused",
        token=None,
        clock=FastClock(),
        console=Console(file=screen, force_terminal=True, width=100, color_system=None),
    )
    phases = iter(["Pending", "Pending", "InProgress", "Completed"])

    def fetch() -> JsonObject:
        return {"status": {"phase": next(phases)}}

    final = wait_for(
        state,
        what="operation/x",
        fetch=fetch,
        describe=lambda op: str(op["status"]["phase"]),
        is_done=lambda op: op["status"]["phase"] == "Completed",
        timeout_s=60,
    )

    assert final == {"status": {"phase": "Completed"}}
    without_control_codes = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    printed = [
        line for line in re.split(r"[\r\n]", without_control_codes) if line and "operation/x" not in line
    ]
    assert printed == ["Pending", "InProgress", "Completed"], "one line per change; the spinner says the rest"
