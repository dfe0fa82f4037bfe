"""``virtplane explain KIND[.field.path]``: a field's type, description, default, allowed values
and children, from the models' JSON schema (offline: no server is asked)."""

from __future__ import annotations

from typing import Annotated

import typer

from virtplane.cli.errors import CliError
from virtplane.cli.fields import NO_DEFAULT, Field, FieldNotFound, field_at
from virtplane.cli.kinds import resolve_kind

__all__ = ["explain", "register", "render"]

_EPILOG = (
    "Examples:\n"
    "  virtplane explain vm\n"
    "  virtplane explain vm.spec.nics\n"
    "  virtplane explain pool.spec.kind\n"
    "  virtplane explain host.status.conditions"
)


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


def explain(
    path: Annotated[
        str,
        typer.Argument(
            help="A kind (vm, host, pool, ...), optionally with a dotted field path: vm.spec.nics."
        ),
    ],
) -> None:
    """Explain a kind or one of its fields: type, description, default, allowed values, children."""
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
