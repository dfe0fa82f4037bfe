"""``get``'s output formats for scripts, as kubectl's: ``-o name``, ``-o jsonpath=TEMPLATE``,
``-o custom-columns=HEADER:PATH,...``, with ``--sort-by=PATH`` and ``--no-headers``.

Paths are JSONPath (jsonpath-ng, its extended syntax: filters such as
``[?(@.status.phase=="Running")]``) written as kubectl writes them: ``.metadata.name`` or
``{.items[*].metadata.name}``. jsonpath-ng is imported only when a path is used.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from virtplane.cli.errors import JsonObject
from virtplane.cli.kinds import EVENTS, KindInfo
from virtplane.cli.output import OutputFormat, cell_text, new_table, print_structured, print_table
from virtplane.cli.tables import event_id, print_events, print_resources

if TYPE_CHECKING:
    from jsonpath_ng import JSONPath

__all__ = ["GetOutput", "Style", "parse_get_output", "print_get"]


class Style(StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"
    NAME = "name"
    JSONPATH = "jsonpath"
    CUSTOM_COLUMNS = "custom-columns"


_TEMPLATED = (Style.JSONPATH, Style.CUSTOM_COLUMNS)


@dataclass(frozen=True)
class GetOutput:
    style: Style = Style.TABLE
    template: str = ""
    """What follows ``=`` in ``jsonpath=...`` or ``custom-columns=...``."""

    @property
    def basic(self) -> OutputFormat | None:
        """The format as the other commands know it (table, wide, json, yaml), or None."""
        return None if self.style in (*_TEMPLATED, Style.NAME) else OutputFormat(self.style.value)


def parse_get_output(text: str) -> GetOutput:
    """``-o``'s value: ``yaml``, ``name``, ``jsonpath={.metadata.name}``... (a bad one: exit 2)."""
    if isinstance(text, GetOutput):  # click passes a default through the parser too
        return text
    name, equals, template = text.partition("=")
    try:
        style = Style(name.strip().lower())
    except ValueError:
        known = ", ".join(f"{s.value}=..." if s in _TEMPLATED else s.value for s in Style)
        raise typer.BadParameter(f"{text!r} is not a format; use one of: {known}") from None
    if style in _TEMPLATED and not template.strip():
        example = (
            "'{.metadata.name}'" if style is Style.JSONPATH else "NAME:.metadata.name,PHASE:.status.phase"
        )
        raise typer.BadParameter(f"{style.value} needs a template: -o {style.value}={example}")
    if style not in _TEMPLATED and equals:
        raise typer.BadParameter(f"{style.value} takes no '=...'")
    output = GetOutput(style, template)
    if style is Style.JSONPATH:
        _template_parts(template)  # checked now: a usage error, before any request
    elif style is Style.CUSTOM_COLUMNS:
        _columns(template)
    return output


def compile_path(path: str, *, option: str = "--output") -> JSONPath:
    """A kubectl-style path (``.status.phase``, ``{.items[*].metadata.name}``) as jsonpath-ng's."""
    from jsonpath_ng.exceptions import JSONPathError
    from jsonpath_ng.ext.parser import parse

    expression = path.strip()
    if expression.startswith("{") and expression.endswith("}"):
        expression = expression[1:-1].strip()
    if not expression.startswith("$"):
        expression = "$" + (expression if expression.startswith((".", "[")) else "." + expression)
    try:
        return parse(expression)
    except JSONPathError as error:
        raise typer.BadParameter(f"{path!r} is not a JSONPath: {error}", param_hint=option) from None


_EXPRESSION = re.compile(r"\{([^{}]*)\}")
_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\\\": "\\"}


def _template_parts(template: str) -> list[str | JSONPath]:
    """Literal text and compiled paths: ``{.metadata.name}{"\\n"}`` as kubectl's templates
    (without ``range``); a bare path is one expression."""
    if "{" not in template:
        return [compile_path(template)]
    parts: list[str | JSONPath] = []
    position = 0
    for match in _EXPRESSION.finditer(template):
        parts.append(_literal(template[position : match.start()]))
        inner = match.group(1).strip()
        if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "\"'":  # {"\n"}: a literal
            parts.append(_literal(inner[1:-1]))
        else:
            parts.append(compile_path(inner))
        position = match.end()
    parts.append(_literal(template[position:]))
    if any(isinstance(part, str) and ("{" in part or "}" in part) for part in parts):
        raise typer.BadParameter(f"{template!r}: a '{{' without its '}}'", param_hint="--output")
    return [part for part in parts if part != ""]


def _literal(text: str) -> str:
    for escaped, plain in _ESCAPES.items():
        text = text.replace(escaped, plain)
    return text


def _columns(template: str) -> list[tuple[str, JSONPath]]:
    columns = []
    for spec in template.split(","):
        header, colon, path = spec.partition(":")
        if not colon or not header.strip() or not path.strip():
            raise typer.BadParameter(
                f"{spec!r}: each column is HEADER:PATH, e.g. custom-columns=NAME:.metadata.name",
                param_hint="--output",
            )
        columns.append((header.strip(), compile_path(path)))
    return columns


def _found(path: JSONPath, data: Any) -> list[Any]:
    return [match.value for match in path.find(data)]


def _text(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _sort_key(path: JSONPath, item: JsonObject) -> tuple[int, Any]:
    """Numbers by value, then text; an item without the field last."""
    values = _found(path, item)
    if not values or values[0] is None:
        return (2, "")
    first = values[0]
    if isinstance(first, int | float) and not isinstance(first, bool):
        return (0, first)
    return (1, _text(first))


def sorted_items(items: Sequence[JsonObject], sort_by: str) -> list[JsonObject]:
    path = compile_path(sort_by, option="--sort-by")
    return sorted(items, key=lambda item: _sort_key(path, item))


def print_get(
    console: Console,
    info: KindInfo,
    items: Sequence[JsonObject],
    output: GetOutput,
    *,
    single: bool = False,
    sort_by: str | None = None,
    headers: bool = True,
) -> None:
    """What ``get`` prints: one object (``single``) or a list, in ``output``'s format."""
    if sort_by:
        items = sorted_items(items, sort_by)
    basic = output.basic
    if basic in (OutputFormat.JSON, OutputFormat.YAML):
        print_structured(items[0] if single else {"items": list(items)}, basic)
    elif output.style is Style.NAME:
        for item in items:
            name = event_id(item) if info is EVENTS else (item.get("metadata") or {}).get("name")
            sys.stdout.write(f"{info.short}/{name}\n")
    elif output.style is Style.JSONPATH:
        data = items[0] if single else {"kind": "List", "items": list(items)}
        text = "".join(
            part if isinstance(part, str) else " ".join(_text(v) for v in _found(part, data))
            for part in _template_parts(output.template)
        )
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    elif output.style is Style.CUSTOM_COLUMNS:
        columns = _columns(output.template)
        table = new_table([header for header, _ in columns])
        table.show_header = headers
        for item in items:
            table.add_row(*(cell_text(",".join(_text(v) for v in _found(path, item))) for _, path in columns))
        print_table(console, table)
    elif info is EVENTS and items:
        print_events(console, list(items), headers=headers)
    elif info is EVENTS:
        console.print("No events found.")
    else:
        print_resources(console, info, items, basic or OutputFormat.TABLE, headers=headers)
