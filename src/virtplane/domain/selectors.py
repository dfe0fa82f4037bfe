"""Label and field selectors in Kubernetes' grammar, parsed into requirements.

Label selectors (``labelSelector``)::

    app=web            app==web           tier!=db
    env in (prod,qa)   env notin (dev)    canary       !legacy

Field selectors (``fieldSelector``) take ``=``, ``==`` and ``!=`` only, on the fields a
kind can be selected by (``SELECTABLE_FIELDS``; the store keeps an index for each).
Requirements are comma-separated and all must hold. ``!=`` and ``notin`` also match an
object that has no such label, as in Kubernetes.

A malformed selector raises ``SelectorError`` with the 0-based position of the
character where parsing failed, so that the API and the CLI can point at it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any, get_args

from pydantic import BaseModel

from virtplane.domain.base import Resource
from virtplane.domain.names import LABEL_KEY

__all__ = [
    "SELECTABLE_FIELDS",
    "Operator",
    "Requirement",
    "Selector",
    "SelectorError",
    "parse_field_selector",
    "parse_label_selector",
    "selectable_fields",
]

SELECTABLE_FIELDS = ("metadata.name", "spec.run_policy", "spec.vm", "status.host", "status.phase")
"""Fields a field selector may name; a kind takes those of them its resource has."""

MAX_SELECTOR_LENGTH = 4096
MAX_REQUIREMENTS = 64
"""Requirements in one selector at most: each becomes a condition of the store's query, and a
few thousand exceed what the database takes in one statement (SQLite: "Expression tree is
too large") long before the length does."""
MAX_VALUES = 256
"""Values of one ``in`` or ``notin`` at most."""


class Operator(StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    NOT_EXISTS = "!"

    @property
    def negative(self) -> bool:
        """Matches objects without the key (and only those, for NOT_EXISTS)."""
        return self in (Operator.NOT_EQUALS, Operator.NOT_IN, Operator.NOT_EXISTS)


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.NOT_EXISTS:
            return f"!{self.key}"
        if self.operator in (Operator.IN, Operator.NOT_IN):
            return f"{self.key} {self.operator.value} ({','.join(self.values)})"
        return f"{self.key}{self.operator.value}{self.values[0]}"


@dataclass(frozen=True)
class Selector:
    """All of ``requirements`` must hold; an empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.requirements)

    def __str__(self) -> str:
        return self.text

    @cached_property  # frozen: written once (placement's reasons name a rule's selector often)
    def text(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with ``labels`` is selected: the store's query (``store.lists``), in memory."""
        for r in self.requirements:
            member = r.key in labels and (not r.values or labels[r.key] in r.values)
            if member == r.operator.negative:
                return False
        return True


class SelectorError(ValueError):
    """A selector that does not parse; ``position`` is the 0-based offset of the offending character."""

    def __init__(self, text: str, position: int, problem: str) -> None:
        super().__init__(f"at position {position}: {problem}")
        self.text = text
        self.position = position
        self.problem = problem


# ------------------------------------------------------------------ lexer

_SPECIAL = "!=(),"


@dataclass(frozen=True)
class _Token:
    kind: str  # "ident", "!", "=", "==", "!=", "(", ")", ",", "end"
    text: str
    position: int

    def describe(self) -> str:
        return "the end" if self.kind == "end" else repr(self.text)


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif text.startswith(("==", "!="), i):
            tokens.append(_Token(text[i : i + 2], text[i : i + 2], i))
            i += 2
        elif char in _SPECIAL:
            tokens.append(_Token(char, char, i))
            i += 1
        else:
            start = i
            while i < len(text) and not text[i].isspace() and text[i] not in _SPECIAL:
                i += 1
            tokens.append(_Token("ident", text[start:i], start))
    tokens.append(_Token("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        if len(text) > MAX_SELECTOR_LENGTH:
            raise SelectorError(text, MAX_SELECTOR_LENGTH, f"longer than {MAX_SELECTOR_LENGTH} characters")
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at = min(self.at + 1, len(self.tokens) - 1)
        return token

    def fail(self, token: _Token, problem: str) -> SelectorError:
        return SelectorError(self.text, token.position, problem)

    def requirements(self, one: Any) -> tuple[Requirement, ...]:
        """``one`` parses a requirement; they are separated by commas."""
        found: list[Requirement] = []
        if self.peek().kind == "end":
            return ()
        while True:
            if len(found) == MAX_REQUIREMENTS:
                raise self.fail(self.peek(), f"selectors are limited to {MAX_REQUIREMENTS} requirements")
            found.append(one())
            token = self.take()
            if token.kind == "end":
                return tuple(found)
            if token.kind != ",":
                raise self.fail(token, f"expected ',' or the end, found {token.describe()}")

    def identifier(self, what: str) -> _Token:
        token = self.take()
        if token.kind != "ident":
            raise self.fail(token, f"expected {what}, found {token.describe()}")
        return token

    def value(self) -> str:
        """A value after = or !=: may be empty (``key=`` selects the empty value)."""
        token = self.peek()
        if token.kind == "ident":
            self.take()
            return token.text
        if token.kind in (",", "end"):
            return ""
        raise self.fail(token, f"expected a value, found {token.describe()}")

    def value_list(self) -> tuple[str, ...]:
        opening = self.take()
        if opening.kind != "(":
            raise self.fail(opening, f"expected '(' after in/notin, found {opening.describe()}")
        values: list[str] = []
        while True:
            if len(values) == MAX_VALUES:
                raise self.fail(self.peek(), f"in and notin take at most {MAX_VALUES} values")
            values.append(self.identifier("a value").text)
            token = self.take()
            if token.kind == ")":
                return tuple(values)
            if token.kind != ",":
                raise self.fail(token, f"expected ',' or ')', found {token.describe()}")


def _check_label_key(parser: _Parser, token: _Token) -> str:
    if not LABEL_KEY.matches(token.text):
        raise parser.fail(
            token, f"{token.text!r} is not a label key (prefix/name of letters, digits, '-', '_', '.')"
        )
    return token.text


def parse_label_selector(text: str) -> Selector:
    """``app=web,tier in (a,b),!legacy`` → a Selector; raises SelectorError."""
    parser = _Parser(text)

    def requirement() -> Requirement:
        if parser.peek().kind == "!":
            parser.take()
            key = _check_label_key(parser, parser.identifier("a label key after '!'"))
            return Requirement(key, Operator.NOT_EXISTS)
        key = _check_label_key(parser, parser.identifier("a label key"))
        token = parser.peek()
        if token.kind in (",", "end"):
            return Requirement(key, Operator.EXISTS)
        parser.take()
        if token.kind in ("=", "=="):
            return Requirement(key, Operator.EQUALS, (parser.value(),))
        if token.kind == "!=":
            return Requirement(key, Operator.NOT_EQUALS, (parser.value(),))
        if token.kind == "ident" and token.text in ("in", "notin"):
            return Requirement(key, Operator(token.text), parser.value_list())
        raise parser.fail(token, f"expected =, ==, !=, in, notin, ',' or the end, found {token.describe()}")

    return Selector(parser.requirements(requirement))


def parse_field_selector(text: str, fields: Collection[str]) -> Selector:
    """``status.phase=Running,spec.vm!=web-1`` → a Selector of the ``fields`` given; raises SelectorError."""
    parser = _Parser(text)

    def requirement() -> Requirement:
        key = parser.identifier("a field")
        if key.text not in fields:
            raise parser.fail(
                key, f"cannot select by field {key.text!r}; selectable: {', '.join(sorted(fields))}"
            )
        token = parser.take()
        if token.kind in ("=", "=="):
            return Requirement(key.text, Operator.EQUALS, (parser.value(),))
        if token.kind == "!=":
            return Requirement(key.text, Operator.NOT_EQUALS, (parser.value(),))
        raise parser.fail(token, f"field selectors take =, == or !=; found {token.describe()}")

    return Selector(parser.requirements(requirement))


# ------------------------------------------------------------------ which kind has which fields


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (``Model`` or ``Model | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _has_path(model: type[BaseModel], path: str) -> bool:
    current: type[BaseModel] | None = model
    for part in path.split("."):
        if current is None or part not in current.model_fields:
            return False
        current = _model_of(current.model_fields[part].annotation)
    return True


def selectable_fields(cls: type[Resource]) -> frozenset[str]:
    """The fields of ``SELECTABLE_FIELDS`` that resources of ``cls`` have."""
    return frozenset(path for path in SELECTABLE_FIELDS if _has_path(cls, path))
