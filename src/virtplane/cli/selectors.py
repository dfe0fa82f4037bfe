"""Client-side label selectors for ``get -l``: ``app=web``, ``tier!=db``, ``canary``, ``!legacy``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import typer

from virtplane.cli.client import JsonObject

__all__ = ["LabelRequirement", "LabelSelector"]


class Operator(StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    EXISTS = "exists"
    NOT_EXISTS = "!exists"


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: Operator
    value: str = ""

    def matches(self, labels: dict[str, str]) -> bool:
        if self.operator is Operator.EXISTS:
            return self.key in labels
        if self.operator is Operator.NOT_EXISTS:
            return self.key not in labels
        if self.operator is Operator.EQUALS:
            return labels.get(self.key) == self.value
        return labels.get(self.key) != self.value


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[LabelRequirement, ...] = ()

    @classmethod
    def parse(cls, expressions: Iterable[str]) -> LabelSelector:
        """Parse ``-l`` values; each may hold several comma-separated requirements.

        Raises ``typer.BadParameter`` (a usage error) for an empty key.
        """
        requirements = []
        for expression in expressions:
            for part in (p.strip() for p in expression.split(",")):
                if part:
                    requirements.append(_parse_requirement(part))
        return cls(tuple(requirements))

    def matches(self, resource: JsonObject) -> bool:
        metadata = resource.get("metadata") or {}
        labels = metadata.get("labels") or {}
        return all(requirement.matches(labels) for requirement in self.requirements)


def _parse_requirement(text: str) -> LabelRequirement:
    if "!=" in text:
        key, value = text.split("!=", 1)
        requirement = LabelRequirement(key.strip(), Operator.NOT_EQUALS, value.strip())
    elif "=" in text:
        key, value = text.split("==", 1) if "==" in text else text.split("=", 1)
        requirement = LabelRequirement(key.strip(), Operator.EQUALS, value.strip())
    elif text.startswith("!"):
        requirement = LabelRequirement(text[1:].strip(), Operator.NOT_EXISTS)
    else:
        requirement = LabelRequirement(text, Operator.EXISTS)
    if not requirement.key:
        raise typer.BadParameter(f"{text!r} has no label key", param_hint="--selector")
    return requirement
