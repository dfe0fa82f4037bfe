"""The fields of a kind, read from a JSON schema: ``virtplane explain`` reads the models' own
schema (offline), the docs' field reference reads the OpenAPI document's (the same models).

A schema here is a JSON-schema dict whose ``$ref``s name entries of ``defs`` by their last
path segment (``#/$defs/Nic`` in a model's schema, ``#/components/schemas/Nic`` in OpenAPI).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Field", "FieldNotFound", "field_at", "walk"]

Schema = Mapping[str, Any]
NO_DEFAULT = "-"


class FieldNotFound(LookupError):
    """No such field; ``known`` lists the fields at the level where the path went wrong."""

    def __init__(self, path: str, known: list[str]) -> None:
        super().__init__(path)
        self.path = path
        self.known = known


@dataclass(frozen=True)
class Field:
    path: str
    """Dotted from the kind: ``spec.nics``; empty for the kind itself."""
    type: str
    """``integer``, ``list of Nic``, ``map of string``, ``RunPolicy``, ..."""
    description: str
    default: str
    """The default as JSON, or ``-`` when the field has none."""
    allowed: tuple[str, ...]
    """The values an enum or a constant allows, or the range a number or a list's length
    must keep to (``16 .. 4194304``, ``at most 16 items``); empty when the type is all."""
    required: bool
    children: tuple[Field, ...]
    """The fields one level down (of an object, or of a list's or map's items)."""

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


def _target(schema: Schema, defs: Mapping[str, Schema]) -> Schema:
    """Follow a ``$ref``, a one-element ``allOf`` and a nullable ``anyOf`` to the schema meant."""
    while True:
        if "$ref" in schema:
            schema = defs[str(schema["$ref"]).rsplit("/", 1)[-1]]
        elif len(schema.get("allOf", ())) == 1:
            schema = schema["allOf"][0]
        elif "anyOf" in schema:
            options = [s for s in schema["anyOf"] if s.get("type") != "null"]
            if len(options) != 1:
                return schema
            schema = options[0]
        else:
            return schema


def _type(schema: Schema, defs: Mapping[str, Schema]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if len(schema.get("allOf", ())) == 1:
        return _type(schema["allOf"][0], defs)
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(_type(s, defs) for s in options) or "null"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}), defs)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return f"map of {_type(schema['additionalProperties'], defs)}"
    return str(kind)


def _items(schema: Schema, defs: Mapping[str, Schema]) -> Schema:
    """What a field holds one level down: an object's own schema, a list's or a map's items."""
    target = _target(schema, defs)
    if target.get("type") == "array":
        return _items(target.get("items", {}), defs)
    if target.get("type") == "object" and isinstance(target.get("additionalProperties"), Mapping):
        return _items(target["additionalProperties"], defs)
    return target


def _number(value: Any) -> str:
    """``64`` for the ``64.0`` an OpenAPI document may carry for a whole bound."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _limits(schema: Schema) -> tuple[str, ...]:
    low, high = schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum")
    found = []
    if low is not None or high is not None:
        low_text = "" if low is None else _number(low)
        found.append(f"{low_text} .. {'' if high is None else _number(high)}".strip())
    if "maxItems" in schema:
        found.append(f"at most {schema['maxItems']} items")
    if "maxLength" in schema:
        found.append(f"at most {schema['maxLength']} characters")
    return tuple(found)


def _field(path: str, schema: Schema, defs: Mapping[str, Schema], required: bool, depth: int) -> Field:
    target, inner = _target(schema, defs), _items(schema, defs)
    # the field's own words, else its type's (a model's docstring, a list's item model's)
    description = schema.get("description") or target.get("description") or inner.get("description") or ""
    allowed = tuple(str(v) for v in inner.get("enum", ()))
    if "const" in inner:
        allowed = (str(inner["const"]),)
    for option in target.get("anyOf", [target]):  # a size: a bounded number, or a string with a unit
        allowed += _limits(option)
    default = json.dumps(schema["default"]) if "default" in schema else NO_DEFAULT
    properties: Mapping[str, Schema] = inner.get("properties", {}) if depth < 12 else {}
    wanted = set(inner.get("required", ()))
    children = tuple(
        _field(f"{path}.{name}" if path else name, sub, defs, name in wanted, depth + 1)
        for name, sub in properties.items()
    )
    return Field(
        path, _type(schema, defs), " ".join(str(description).split()), default, allowed, required, children
    )


def field_at(root: Schema, defs: Mapping[str, Schema], path: str) -> Field:
    """The field at dotted ``path`` (empty: the kind itself); a list's items are stepped into."""
    field = _field("", root, defs, True, 0)
    for part in [p for p in path.split(".") if p]:
        by_name = {child.name: child for child in field.children}
        if part not in by_name:
            raise FieldNotFound(f"{field.path}.{part}" if field.path else part, sorted(by_name))
        field = by_name[part]
    return field


def walk(field: Field) -> Iterator[Field]:
    """``field``'s children and theirs, depth first, in the schema's order."""
    for child in field.children:
        yield child
        yield from walk(child)
