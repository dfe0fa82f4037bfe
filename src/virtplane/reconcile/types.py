"""The vocabulary every reconciler speaks: a key in, a verdict out."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class Request:
    """Names one root object to look at again; deliberately carries no event or payload."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class Result:
    """A successful reconcile; ``requeue_after`` asks to look again after that many seconds."""

    requeue_after: float | None = None

    def __post_init__(self) -> None:
        delay = self.requeue_after
        if delay is not None and (not math.isfinite(delay) or delay < 0):
            raise ValueError(f"requeue_after must be a finite, non-negative delay, got {delay!r}")


class TerminalError(Exception):
    """Retrying will not help: the controller logs it, forgets the backoff and does not requeue."""


Reconciler: TypeAlias = Callable[[Request], Awaitable[Result | None]]

__all__ = ["Reconciler", "Request", "Result", "TerminalError"]
