"""``virtplane explain KIND[.field.path]``: a field's type, description, default, allowed values
and children, from the models' JSON schema (offline: no server is asked).

``virtplane explain placement VM [--host H]``: the server's placement verdicts for the VM
(``GET /v1/vms/VM/placement``), each host chosen, ranked (score and why) or excluded (every
reason), as a table."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from virtplane.cli.context import state_of
from virtplane.cli.errors import CliError
from virtplane.cli.fields import NO_DEFAULT, Field, FieldNotFound, field_at
from virtplane.cli.kinds import resolve_kind

__all__ = ["explain", "register", "render"]

_EPILOG = (
    "Examples:\n"
    "  virtplane explain vm\n"
    "  virtplane explain vm.spec.nics\n"
    "  virtplane explain pool.spec.kind\n"
    "  virtplane explain host.status.conditions\n"
    "  virtplane explain placement web-1 --host node-2"
)
PLACEMENT = "placement"
ORDER = {"chosen": 0, "ranked": 1, "current": 2, "excluded": 3}


def _signature(field: Field) -> str:
    return f"<{field.type}>" + (" (required)" if field.required else "")


def render(kind: str, field: Field) -> str:
    """The explanation as text, in the order kubectl explain uses."""
    lines = [f"KIND:     {kind}"]
    if field.path:
        lines.append(f"FIELD:    {field.path} {_signature(field)}")
    lines += ["", "DESCRIPTION:", f"    {field.description or '(none)'}"]
    if field.default != NO_DEFAULT:
        lines += ["", f"DEFAULT:  {field.default}"]
    if field.allowed:
        lines += ["", f"ALLOWED:  {', '.join(field.allowed)}"]
    if field.children:
        lines += ["", "FIELDS:"]
        for child in field.children:
            lines.append(f"    {child.name} {_signature(child)}")
            if child.description:
                lines.append(f"        {child.description}")
            facts = [f"default {child.default}"] if child.default != NO_DEFAULT else []
            if child.allowed:
                facts.append(f"allowed {', '.join(child.allowed)}")
            if facts:
                lines.append(f"        ({'; '.join(facts)})")
    return "\n".join(lines) + "\n"


def placement_table(answer: dict[str, Any]) -> Table:
    """Per host: its verdict, rank, score, and why (ranked) or every reason (excluded)."""
    mode = "a live migration" if answer["mode"] == "migration" else "a start"
    rules = ", ".join(answer["rules"]) or "none"
    title = f"VM {answer['vm']} ({answer['phase']}), judged for {mode}; rules: {rules}"
    if answer["blocked"]:
        title += f"; cannot leave {answer['blocked']}"
    grid = Table(title=title, title_justify="left", box=None, header_style="bold")
    for column in ("HOST", "VERDICT", "RANK", "SCORE", "WHY"):
        grid.add_column(column, justify="right" if column in ("RANK", "SCORE") else "left", overflow="fold")
    for host in sorted(answer["hosts"], key=lambda h: (ORDER[h["verdict"]], h["rank"], h["host"])):
        ranked = host["verdict"] in ("chosen", "ranked")
        grid.add_row(
            host["host"],
            host["verdict"],
            str(host["rank"]) if ranked else "-",
            f"{host['score']:.3f}" if ranked else "-",
            host["why"] if ranked else "; ".join(host["reasons"]),
        )
    return grid


def explain(
    ctx: typer.Context,
    path: Annotated[
        str,
        typer.Argument(
            help="A kind (vm, host, pool, ...), optionally with a dotted field path: vm.spec.nics; "
            "or 'placement' and a VM."
        ),
    ],
    vm: Annotated[str | None, typer.Argument(help="With 'placement': the VM.", show_default=False)] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="With 'placement': only this host.", show_default=False)
    ] = None,
) -> None:
    """Explain a kind or one of its fields (type, description, default, allowed values, children),
    or where a VM may run and why: explain placement VM [--host H]."""
    if path == PLACEMENT:
        if vm is None:
            raise CliError("MissingVM", "name the VM: virtplane explain placement VM [--host H]")
        state = state_of(ctx)
        params: dict[str, str | int] = {"host": host} if host else {}
        answer = state.client.request("GET", f"/v1/vms/{vm}/placement", params=params)
        state.console.print(placement_table(answer))
        return
    if vm is not None or host is not None:
        raise CliError("UnexpectedArgument", f"only 'explain placement' takes a VM and --host, not {path}")
    from virtplane.domain.resources.registry import KIND_BY_NAME  # the models: only this command

    kind_text, _, field_path = path.partition(".")
    info = resolve_kind(kind_text)
    model = KIND_BY_NAME[info.kind]
    schema = model.model_json_schema()
    try:
        field = field_at(schema, schema.get("$defs", {}), field_path)
    except FieldNotFound as missing:
        raise CliError(
            "UnknownField",
            f"{info.kind} has no field {missing.path}; fields there: {', '.join(missing.known) or 'none'}",
        ) from None
    typer.echo(render(info.kind, field), nl=False)


def register(app: typer.Typer) -> None:
    app.command(epilog=_EPILOG)(explain)
