"""Following the server's watches: ``get -w``, ``events --follow`` and ``--wait`` on many operations.

Each starts from a list (or a page of events) and watches from that list's revision, so
nothing that happens in between is missed; a dropped connection is resumed from the last
revision seen (``ApiClient.watch``), and a watch the server can no longer resume (410)
lists again.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Generator
from contextlib import closing

from rich.text import Text

from virtplane.cli.context import CliState
from virtplane.cli.errors import CliError, JsonObject, WaitTimedOut, WatchExpired
from virtplane.cli.kinds import KindInfo
from virtplane.cli.output import OutputFormat, dig, print_table
from virtplane.cli.progress_view import Frame, ProgressView, Row
from virtplane.cli.tables import resource_table

__all__ = ["follow_events", "watch_operations", "watch_resources"]

Params = dict[str, str | int]


def _changes(
    state: CliState, plural: str, revision: int, params: Params, timeout_s: float | None = None
) -> Generator[JsonObject]:
    def retrying(error: CliError) -> None:
        state.err_console.print(Text(f"(watch interrupted: {error.message}; reconnecting)", style="yellow"))

    return state.client.watch(
        plural,
        revision,
        params,
        timeout_s=timeout_s,
        sleep=state.clock.sleep,
        monotonic=state.clock.monotonic,
        on_retry=retrying,
    )


def _print_change(
    state: CliState, info: KindInfo, event: JsonObject, output: OutputFormat, known: set[str]
) -> None:
    """Print a change of one of ``known`` (what was printed so far) or a new one; keep ``known``."""
    name = str(dig(event, "object.metadata.name", ""))
    if event.get("type") == "DELETED":
        if name not in known:
            return  # never shown here (a deletion the server could not match against the selector)
        known.discard(name)
    else:
        known.add(name)
    if output in (OutputFormat.JSON, OutputFormat.YAML):
        sys.stdout.write(json.dumps(event, default=str) + "\n")
        sys.stdout.flush()
        return
    obj = event.get("object") or {}
    kind = str(event.get("type", ""))
    if kind == "DELETED":
        state.console.print(Text(f"{kind:<9} {dig(obj, 'metadata.name', '-')} deleted"))
        return
    table = resource_table(info, [obj], wide=output is OutputFormat.WIDE, event=f"{kind:<8}")
    table.show_header = False
    print_table(state.console, table)


def watch_resources(
    state: CliState,
    info: KindInfo,
    items: list[JsonObject],
    revision: int,
    params: Params,
    output: OutputFormat,
    timeout_s: float | None = None,
) -> None:
    """After the list ``items`` (read at ``revision``) was printed: print every change until
    Ctrl-C, or until ``timeout_s`` seconds have passed."""
    known = {str(dig(item, "metadata.name", "")) for item in items}
    if output in (OutputFormat.JSON, OutputFormat.YAML):
        for item in items:
            _print_change(state, info, {"type": "ADDED", "object": item}, output, set())
    deadline = None if timeout_s is None else state.clock.monotonic() + timeout_s
    try:
        while deadline is None or state.clock.monotonic() < deadline:
            remaining = None if deadline is None else deadline - state.clock.monotonic()
            try:
                for event in _changes(state, info.plural, revision, params, timeout_s=remaining):
                    _print_change(state, info, event, output, known)
            except WatchExpired:
                state.err_console.print(
                    Text("(the watch fell too far behind: listing again)", style="yellow")
                )
                fresh, revision = state.client.list_all(info.plural, params)
                gone = known - {str(dig(item, "metadata.name", "")) for item in fresh}
                for name in sorted(gone):
                    deleted = {"type": "DELETED", "object": {"metadata": {"name": name}}}
                    _print_change(state, info, deleted, output, known)
                for item in fresh:
                    _print_change(state, info, {"type": "MODIFIED", "object": item}, output, known)
    except KeyboardInterrupt:
        return


def follow_events(
    state: CliState,
    since: int,
    params: Params,
    print_event: Callable[[JsonObject], object],
) -> None:
    """Print every event after the event id ``since`` until Ctrl-C."""
    try:
        while True:
            try:
                for event in _changes(state, "events", since, params):
                    obj = event.get("object") or {}
                    since = max(since, int(obj.get("id") or 0))
                    print_event(obj)
            except WatchExpired:  # not sent for events today (a follow goes on from the oldest kept)
                since = state.client.events_page(limit=1)[1]
    except KeyboardInterrupt:
        return


def watch_operations(
    state: CliState,
    selector: str,
    expected: set[str],
    done: Callable[[JsonObject], bool],
    row: Callable[[JsonObject], Row],
    timeout_s: float,
) -> dict[str, JsonObject]:
    """Follow the operations ``selector`` selects until each of ``expected`` is ``done``.

    Shows the ``row`` of each operation (``progress_view``) whenever one changes; returns
    the last state of each. Raises ``CliError`` (Timeout) after ``timeout_s``.
    """
    with ProgressView(state.console) as view:
        return _watch_operations(
            state, selector, expected, done, lambda ops: view.show(_frame(ops, row)), timeout_s
        )


def _frame(operations: dict[str, JsonObject], row: Callable[[JsonObject], Row]) -> Frame:
    return Frame(rows=tuple(sorted((row(op) for op in operations.values()), key=lambda r: r.name)))


def _watch_operations(
    state: CliState,
    selector: str,
    expected: set[str],
    done: Callable[[JsonObject], bool],
    show: Callable[[dict[str, JsonObject]], None],
    timeout_s: float,
) -> dict[str, JsonObject]:
    params: Params = {"labelSelector": selector}
    latest: dict[str, JsonObject] = {}

    def take(operation: JsonObject) -> None:
        name = str(dig(operation, "metadata.name", ""))
        if name not in expected:
            return
        latest[name] = operation
        show(latest)

    deadline = state.clock.monotonic() + timeout_s
    items, revision = state.client.list_all("operations", params)
    for item in items:
        take(item)
    while not all(name in latest and done(latest[name]) for name in expected):
        remaining = deadline - state.clock.monotonic()
        if remaining <= 0:
            waiting = sorted(n for n in expected if n not in latest or not done(latest[n]))
            raise WaitTimedOut(f"gave up after {timeout_s:g}s waiting for {', '.join(waiting)}")
        try:
            with closing(_changes(state, "operations", revision, params, timeout_s=remaining)) as changes:
                for event in changes:
                    if event.get("type") != "DELETED":
                        take(event.get("object") or {})
                    if all(name in latest and done(latest[name]) for name in expected):
                        break
        except WatchExpired:
            items, revision = state.client.list_all("operations", params)
            for item in items:
                take(item)
    return latest
