"""Generic resource commands: apply, get, describe (in ``describing``), delete, events."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from virtplane.cli.completion import complete_name
from virtplane.cli.context import CliState, state_of
from virtplane.cli.describing import describe
from virtplane.cli.errors import ApiError, CliError, JsonObject, ServerUnreachable
from virtplane.cli.exit_codes import ExitCode, common_exit_code
from virtplane.cli.formats import GetOutput, parse_get_output, print_get
from virtplane.cli.host_use import with_use
from virtplane.cli.kinds import EVENTS, KindInfo, complete_kind, resolve_kind
from virtplane.cli.manifests import Manifest, apply_manifest, load_manifests
from virtplane.cli.output import OutputFormat, print_error, print_structured, styled
from virtplane.cli.progress_view import Tone
from virtplane.cli.tables import event_id, print_events, print_resources, sorted_events
from virtplane.cli.waiting import one_row, wait_for
from virtplane.cli.watching import follow_events, watch_resources

__all__ = ["register"]

OutputOption = Annotated[
    OutputFormat,
    typer.Option("--output", "-o", case_sensitive=False, help="table, wide (more columns), json or yaml."),
]
FilenamesOption = Annotated[
    list[str],
    typer.Option(
        "--filename",
        "-f",
        help="YAML manifest (several documents allowed); '-' reads stdin.",
        show_default=False,
    ),
]
KindArgument = Annotated[
    str,
    typer.Argument(
        help="vms, hosts, pools, volumes, snapshots, operations, settings or events "
        "(singular, plural, kind name or short alias)",
        show_default=False,
        autocompletion=complete_kind,
    ),
]


def apply(
    ctx: typer.Context,
    filenames: FilenamesOption,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Let the server check each document (validation and admission) and say what it would "
            "do; write nothing.",
        ),
    ] = False,
) -> None:
    """Create resources from YAML manifests, or update the ones that exist.

    Every document needs apiVersion virtplane.io/v1, a kind, metadata.name and a spec.
    Existing resources get the manifest's labels and spec (annotations are merged).
    """
    state = state_of(ctx)
    failures: list[CliError] = []
    for manifest in read_manifests(filenames):
        try:
            result = apply_manifest(state.client, manifest, dry_run=dry_run)
        except ServerUnreachable:
            raise
        except CliError as error:
            failures.append(error)
            print_error(state.err_console, error.reason, f"{manifest.located(error)}: {error.message}")
            continue
        suffix = " (server dry run)" if dry_run else ""
        state.console.print(Text.assemble(f"{manifest.reference} ", styled(result), suffix))
    if failures:
        raise typer.Exit(common_exit_code(failures))


def read_manifests(filenames: list[str]) -> list[Manifest]:
    manifests: list[Manifest] = []
    for filename in filenames:
        manifests.extend(load_manifests(filename, _read_source(filename)))
    return manifests


def _read_source(filename: str) -> str:
    if filename == "-":
        return sys.stdin.read()
    try:
        return Path(filename).read_text(encoding="utf-8")
    except OSError as error:
        raise CliError("FileError", f"cannot read {filename}: {error.strerror or error}") from error


def get(
    ctx: typer.Context,
    kind: KindArgument,
    name: Annotated[
        str | None,
        typer.Argument(help="Show only this one.", show_default=False, autocompletion=complete_name),
    ] = None,
    output: Annotated[
        GetOutput | None,
        typer.Option(
            "--output",
            "-o",
            parser=parse_get_output,
            metavar="FORMAT",
            help="table (default), wide (more columns), json, yaml, name (kind/name per line), "
            "jsonpath=TEMPLATE ('{.status.phase}', '{.items[*].metadata.name}') or "
            "custom-columns=HEADER:PATH,... (NAME:.metadata.name,IP:.spec.nics[*].ip).",
            show_default=False,
        ),
    ] = None,
    sort_by: Annotated[
        str | None,
        typer.Option(
            "--sort-by", help="Sort the list by this JSONPath, e.g. .status.host.", show_default=False
        ),
    ] = None,
    no_headers: Annotated[
        bool, typer.Option("--no-headers", help="Tables and custom columns without their header row.")
    ] = False,
    selector: Annotated[
        list[str] | None,
        typer.Option(
            "--selector",
            "-l",
            help="Label selector: key=value, key!=value, 'key in (a,b)', 'key notin (a)', key or !key; "
            "comma-separated or repeated.",
            show_default=False,
        ),
    ] = None,
    field_selector: Annotated[
        list[str] | None,
        typer.Option(
            "--field-selector",
            help="Field selector: status.phase=Running, status.host=node-1, spec.run_policy!=Manual, "
            "spec.vm=web-1 (operations, snapshots); comma-separated or repeated.",
            show_default=False,
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="After the list, print every change (Ctrl-C stops).")
    ] = False,
    watch_timeout: Annotated[
        float | None,
        typer.Option("--watch-timeout", min=0, help="With -w: stop watching after this many seconds."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Events only: how many.")] = 50,
) -> None:
    """List resources of a kind, or show one; with -w, keep printing what changes."""
    state = state_of(ctx)
    info = resolve_kind(kind, allow_events=True)
    output = output or GetOutput()
    if watch and (output.basic is None or sort_by or no_headers):
        raise typer.BadParameter(
            "-w prints changes as rows or JSON lines: -o name, jsonpath, custom-columns, --sort-by and "
            "--no-headers are for a list without -w",
            param_hint="--watch",
        )
    show = partial(print_get, state.console, info, sort_by=sort_by, headers=not no_headers)
    if info is EVENTS:
        if watch:
            _events(state, None, None, limit, watch, output.basic or OutputFormat.TABLE)
        else:
            show(sorted_events(state.client.events_page(limit=limit)[0]), output)
        return
    if name is not None and (selector or field_selector):
        raise typer.BadParameter("a selector cannot be combined with a NAME", param_hint="--selector")
    if info.kind == "Setting" and (selector or field_selector or watch):
        raise typer.BadParameter("settings take no selectors and cannot be watched", param_hint="--watch")
    use = info.kind == "Host" and output.basic is OutputFormat.WIDE  # real use beside allocation
    if name is not None and not watch:
        found = [state.client.get(info.plural, name)]
        show(with_use(state, found) if use else found, output, single=True)
        return
    params = selector_params(
        info, selector or [], [f"metadata.name={name}"] if name else field_selector or []
    )
    items, revision = state.client.list_all(info.plural, params)
    if not watch:
        show(with_use(state, items) if use else items, output)
        return
    basic = output.basic or OutputFormat.TABLE
    if basic not in (OutputFormat.JSON, OutputFormat.YAML):
        print_resources(state.console, info, items, basic)
    watch_resources(state, info, items, revision, params, basic, watch_timeout)


def selector_params(info: KindInfo, labels: list[str], fields: list[str]) -> dict[str, str | int]:
    """Query parameters for ``-l`` and ``--field-selector``, checked here first (errors say where)."""
    params: dict[str, str | int] = {}
    label_text = ",".join(labels)
    field_text = ",".join(fields)
    if not (label_text or field_text):
        return params
    # the models, for the selectable fields: only when there is a selector to check
    from virtplane.domain.resources import KIND_BY_NAME
    from virtplane.domain.selectors import (
        SelectorError,
        parse_field_selector,
        parse_label_selector,
        selectable_fields,
    )

    try:
        parse_label_selector(label_text)
    except SelectorError as error:
        raise typer.BadParameter(f"{label_text!r}: {error}", param_hint="--selector") from None
    try:
        parse_field_selector(field_text, selectable_fields(KIND_BY_NAME[info.kind]))
    except SelectorError as error:
        raise typer.BadParameter(f"{field_text!r}: {error}", param_hint="--field-selector") from None
    if label_text:
        params["labelSelector"] = label_text
    if field_text:
        params["fieldSelector"] = field_text
    return params


def delete(
    ctx: typer.Context,
    kind: KindArgument,
    name: Annotated[
        str, typer.Argument(help="The resource's name.", show_default=False, autocompletion=complete_name)
    ],
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the resource is gone.")] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0,
            help=f"With --wait: seconds to wait at most, then exit {ExitCode.TIMEOUT.value}.",
        ),
    ] = 300,
) -> None:
    """Delete a resource (its finalizers run first: a VM's domain is destroyed)."""
    state = state_of(ctx)
    info = resolve_kind(kind)
    reference = f"{info.short}/{name}"
    response = state.client.delete(info.plural, name)
    # The server answers {"reason": "Deleted" | "DeletionRequested", "message"}: a resource with
    # finalizers (a VM with a domain) is gone only once the controllers have released it.
    pending = wait or response.get("reason") == "DeletionRequested"
    state.console.print(f"{reference} {'deletion requested' if pending else 'deleted'}")
    if not wait:
        return
    wait_for(
        state,
        what=reference,
        fetch=lambda: _get_or_gone(state, info, name),
        frame=one_row(
            reference, lambda r: ("deleted", Tone.GOOD) if r.get("gone") else ("being deleted", Tone.BUSY)
        ),
        is_done=lambda r: bool(r.get("gone")),
        timeout_s=timeout,
    )


def _get_or_gone(state: CliState, info: KindInfo, name: str) -> JsonObject:
    try:
        return state.client.get(info.plural, name)
    except ApiError as error:
        if error.status_code == 404:
            return {"gone": True}
        raise


def events(
    ctx: typer.Context,
    kind: Annotated[
        str | None,
        typer.Option("--kind", help="Only events of this kind (vm, host, ...).", show_default=False),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Only events of this object.", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many recent events.")] = 50,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events (Ctrl-C stops).")
    ] = False,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Show the audit trail: what happened to which object, and why."""
    _events(state_of(ctx), resolve_kind(kind).kind if kind else None, name, limit, follow, output)


def _events(
    state: CliState, kind: str | None, name: str | None, limit: int, follow: bool, output: OutputFormat
) -> None:
    items, newest = state.client.events_page(kind=kind, name=name, limit=limit)
    recent = sorted_events(items)
    if not follow:
        _print_event_list(state, recent, output)
        return
    _print_follow_lines(state, recent, output, last_id=-1)
    params: dict[str, str | int] = {key: value for key, value in (("kind", kind), ("name", name)) if value}
    follow_events(
        state, newest, params, lambda event: _print_follow_lines(state, [event], output, last_id=-1)
    )


def _print_event_list(state: CliState, items: list[JsonObject], output: OutputFormat) -> None:
    if print_structured({"items": items}, output):
        return
    if not items:
        state.console.print("No events found.")
    else:
        print_events(state.console, items)


def _print_follow_lines(
    state: CliState, items: list[JsonObject], output: OutputFormat, *, last_id: int
) -> int:
    """Print the events newer than ``last_id``, one per line; return the newest id seen."""
    for event in items:
        this_id = event_id(event)
        if this_id <= last_id:
            continue
        last_id = this_id
        if output in (OutputFormat.JSON, OutputFormat.YAML):
            sys.stdout.write(json.dumps(event, default=str) + "\n")
            sys.stdout.flush()
            continue
        state.console.print(Text(_follow_line(event)))
    return last_id


def _follow_line(event: JsonObject) -> str:
    timestamp: Any = event.get("time") or ""
    try:
        clock_time = datetime.fromisoformat(str(timestamp)).strftime("%H:%M:%S")
    except ValueError:
        clock_time = str(timestamp) or "--:--:--"
    obj = f"{event.get('kind', '-')}/{event.get('name', '-')}"
    return (
        f"{clock_time}  {event.get('type', '-'):<7}  {event.get('reason', '-'):<22}  {obj:<36}  "
        f"{event.get('message', '')}"
    ).rstrip()


_APPLY_EPILOG = (
    "Examples:\n"
    "  virtplane apply -f fleet.yaml\n"
    "  virtplane apply -f hosts.yaml -f vms.yaml\n"
    "  cat vm.yaml | virtplane apply -f -\n"
    "  virtplane apply -f fleet.yaml --dry-run\n\n"
    "Prints one line per document: vm/web-1 created, configured or unchanged (the server's "
    "object already says what the manifest says, the fields the server fills included)."
)
_GET_EPILOG = (
    "Examples:\n"
    "  virtplane get vms\n"
    "  virtplane get vm web-1 -o yaml\n"
    "  virtplane get hosts -o wide\n"
    "  virtplane get vms -l app=web,tier!=db -o json\n"
    "  virtplane get vms -o name\n"
    "  virtplane get vm web-1 -o jsonpath='{.status.phase}'\n"
    "  virtplane get vms -o jsonpath='{.items[*].metadata.name}'\n"
    "  virtplane get vms -o custom-columns=NAME:.metadata.name,HOST:.status.host --no-headers\n"
    "  virtplane get vms --sort-by=.status.host\n"
    "  virtplane get vms --field-selector status.host=node-1 -w\n"
    "  virtplane get ops\n"
    "  virtplane get events --limit 20"
)
_DESCRIBE_EPILOG = "Examples:\n  virtplane describe vm web-1\n  virtplane describe host node-1"
_DELETE_EPILOG = "Examples:\n  virtplane delete vm web-1 --wait\n  virtplane delete volume web-1-root"
_EVENTS_EPILOG = (
    "Examples:\n"
    "  virtplane events\n"
    "  virtplane events --kind vm --name web-1\n"
    "  virtplane events --follow\n"
    "  virtplane events -o json --limit 500"
)


def register(app: typer.Typer) -> None:
    from virtplane.cli.diffing import DIFF_EPILOG, diff

    app.command(epilog=_APPLY_EPILOG)(apply)
    app.command(epilog=DIFF_EPILOG)(diff)
    app.command(epilog=_GET_EPILOG)(get)
    app.command(epilog=_DESCRIBE_EPILOG)(describe)
    app.command(epilog=_DELETE_EPILOG)(delete)
    app.command(epilog=_EVENTS_EPILOG)(events)
