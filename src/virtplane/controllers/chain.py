"""Running an ordered chain of steps over one state (the shape of Deckhouse's handler chain):
the one idiom of the controllers for ordered, resumable work (the VM's reconcile, a restore).

A step is ``async (state) -> Result | None``: None to go on, a ``Result`` to go on and
ask for a look again after that delay. ``StopChain`` ends the chain early with its
result. A step decides from the state alone whether it has anything to do, so a chain run
again after a crash resumes where the stored state says; the caller writes what the steps
changed (the VM's chain once at the end; a restore at its durable points, named there).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from virtplane.reconcile.types import Result

S = TypeVar("S")


class StopChain(Exception):
    """Ends the chain here; ``result`` is the reconcile's (with the delays asked before)."""

    def __init__(self, result: Result | None = None) -> None:
        super().__init__("stop chain")
        self.result = result


@dataclass(frozen=True)
class Step(Generic[S]):
    name: str
    run: Callable[[S], Awaitable[Result | None]]


def merge_results(results: Sequence[Result | None]) -> Result | None:
    """The soonest look-again any step asked for (None: none asked)."""
    delays = [r.requeue_after for r in results if r is not None and r.requeue_after is not None]
    return Result(requeue_after=min(delays)) if delays else None


async def run_chain(steps: Sequence[Step[S]], state: S) -> tuple[Result | None, str]:
    """Run ``steps`` in order; returns the merged result and the name of the last step run."""
    results: list[Result | None] = []
    for step in steps:
        try:
            results.append(await step.run(state))
        except StopChain as stop:
            results.append(stop.result)
            return merge_results(results), step.name
    return merge_results(results), steps[-1].name if steps else ""


__all__ = ["Step", "StopChain", "merge_results", "run_chain"]
