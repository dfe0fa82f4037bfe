"""How far a VM's move has got: one vocabulary and one transition function for the per-VM
progress of a host maintenance and of a Migrate or Evict operation.

A maintenance keeps a ``MoveProgress`` per VM of its host (``HostMaintenance.status.progress``),
a Migrate or Evict operation one for its VM (``status.progress``). Both change it only through
``advance``, so the attempt / retry / fail ladder is written once: an attempt that failed is
retried on another host until ``max_attempts`` are used, then the VM stays where it runs.

Pure: what happened is passed in as an event; ``tests/domain/test_progress.py`` is the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, assert_never

__all__ = [
    "RETRIED_AFRESH",
    "SETTLED_RETURNS",
    "STUCK",
    "UNFINISHED",
    "Arrived",
    "AttemptFailed",
    "Began",
    "Blocked",
    "InFlight",
    "Left",
    "MoveEvent",
    "MoveProgress",
    "NoSlot",
    "NoTarget",
    "NotReady",
    "NotReturned",
    "PlanAction",
    "ProgressState",
    "ReturnBegan",
    "Returned",
    "StopAsked",
    "StoppedHere",
    "TargetRefused",
    "advance",
    "observed",
    "retrying",
]


class PlanAction(StrEnum):
    """What a maintenance plan does with a VM (DESIGN.md §5.3)."""

    MIGRATE = "Migrate"
    MIGRATE_WITH_STORAGE = "MigrateWithStorage"
    STOP = "Stop"
    FORCE_STOP = "ForceStop"
    LEAVE = "Leave"
    BLOCKED = "Blocked"


class ProgressState(StrEnum):
    PENDING = "Pending"  # nothing done yet (or the VM is not in a phase that can move yet)
    WAITING_FOR_SLOT = "WaitingForSlot"  # the migration limits are taken: it starts when one frees
    MIGRATING = "Migrating"
    RETRYING = "Retrying"  # an attempt failed; the next one goes to another host
    MIGRATED = "Migrated"
    FAILED = "Failed"  # attempts used up, or no target: the VM keeps running where it is
    BLOCKED = "Blocked"  # the plan cannot move it (strategy Error, no target): nothing was touched
    STOPPING = "Stopping"  # maintenance stops it (strategy Stop or ForceStop)
    STOPPED = "Stopped"  # stopped by maintenance; it starts again when the maintenance ends
    LEFT = "Left"  # not running: left alone
    RETURNING = "Returning"  # a cancelled maintenance migrates it back (host.maintenance.return_vms)
    RETURNED = "Returned"
    NOT_RETURNED = "NotReturned"  # stays where it went (no room, not running, gone, failed)


UNFINISHED = frozenset(
    {
        ProgressState.PENDING,
        ProgressState.WAITING_FOR_SLOT,
        ProgressState.MIGRATING,
        ProgressState.RETRYING,
        ProgressState.STOPPING,
        ProgressState.RETURNING,
    }
)
"""Something is still to happen to the VM."""

STUCK = frozenset({ProgressState.FAILED, ProgressState.BLOCKED})
"""The drain cannot move the VM; the host goes to ErrorInMaintenance once nothing else is in flight."""

RETRIED_AFRESH = STUCK | {ProgressState.RETRYING}
"""A retried maintenance (asked again from ErrorInMaintenance) starts these VMs from nothing."""

SETTLED_RETURNS = frozenset({ProgressState.RETURNED, ProgressState.NOT_RETURNED})
"""A VM whose return after a cancel is decided, one way or the other."""


@dataclass(frozen=True)
class MoveProgress:
    state: ProgressState = ProgressState.PENDING
    target: str | None = None
    attempts: int = 0
    tried: tuple[str, ...] = ()
    progress_pct: float = 0.0
    message: str = ""
    # of the migration under way, as the hypervisor measures it (0 when none runs)
    dirty_rate_mib_s: float = 0.0
    remaining_mib: float = 0.0  # memory still to send
    iteration: int = 0  # the memory pass
    post_copy: bool = False

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> MoveProgress:
        """From the stored form (a progress model's dump, or an operation's progress dict)."""
        raw = raw or {}
        return cls(
            state=ProgressState(raw.get("state", ProgressState.PENDING)),
            target=raw.get("target"),
            attempts=int(raw.get("attempts", 0)),
            tried=tuple(str(t) for t in raw.get("tried", ())),
            progress_pct=float(raw.get("progress_pct", 0.0)),
            message=str(raw.get("message", "")),
            dirty_rate_mib_s=float(raw.get("dirty_rate_mib_s", 0.0)),
            remaining_mib=float(raw.get("remaining_mib", 0.0)),
            iteration=int(raw.get("iteration", 0)),
            post_copy=bool(raw.get("post_copy", False)),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "target": self.target,
            "attempts": self.attempts,
            "tried": list(self.tried),
            "progress_pct": self.progress_pct,
            "message": self.message,
            "dirty_rate_mib_s": self.dirty_rate_mib_s,
            "remaining_mib": self.remaining_mib,
            "iteration": self.iteration,
            "post_copy": self.post_copy,
        }


# --------------------------------------------------------------------------- what happened


@dataclass(frozen=True)
class InFlight:
    """The VM's migration intent says this requester's migration is under way."""

    target: str
    attempt: int
    progress_pct: float = 0.0
    returning: bool = False  # back to the host a cancelled maintenance left
    dirty_rate_mib_s: float = 0.0
    remaining_mib: float = 0.0
    iteration: int = 0
    post_copy: bool = False


@dataclass(frozen=True)
class Arrived:
    """The VM runs on the target of the migration that was under way."""


@dataclass(frozen=True)
class AttemptFailed:
    """The migration under way ended without the VM on the target."""

    error: str
    runs_on: str | None


@dataclass(frozen=True)
class Began:
    """A migration to ``target`` started (its intent is on the VM)."""

    target: str


@dataclass(frozen=True)
class TargetRefused:
    """The attempt to ``target`` was refused at once; it counts as an attempt."""

    target: str
    error: str


@dataclass(frozen=True)
class NoSlot:
    why: str


@dataclass(frozen=True)
class NoTarget:
    why: str


@dataclass(frozen=True)
class NotReady:
    """The VM is not in a phase that can move yet (it moves once running)."""

    why: str


@dataclass(frozen=True)
class StopAsked:
    why: str


@dataclass(frozen=True)
class StoppedHere:
    """Maintenance stopped the VM; it starts again when the maintenance ends."""


@dataclass(frozen=True)
class Left:
    """The VM is not running, so the drain leaves it alone."""


@dataclass(frozen=True)
class Blocked:
    why: str


@dataclass(frozen=True)
class ReturnBegan:
    target: str


@dataclass(frozen=True)
class Returned:
    home: str


@dataclass(frozen=True)
class NotReturned:
    why: str


MoveEvent = (
    InFlight
    | Arrived
    | AttemptFailed
    | Began
    | TargetRefused
    | NoSlot
    | NoTarget
    | NotReady
    | StopAsked
    | StoppedHere
    | Left
    | Blocked
    | ReturnBegan
    | Returned
    | NotReturned
)


def _failed(p: MoveProgress, max_attempts: int, error: str, retry_note: str, final_note: str) -> MoveProgress:
    """The ladder: retry on another host while attempts remain, else the VM stays where it runs."""
    if p.attempts >= max_attempts:
        return replace(p, state=ProgressState.FAILED, message=f"{error}{final_note}")
    return replace(p, state=ProgressState.RETRYING, message=f"{error}{retry_note}")


def _tried(p: MoveProgress, target: str) -> tuple[str, ...]:
    return p.tried if target in p.tried else (*p.tried, target)


_IDLE: dict[str, Any] = {"dirty_rate_mib_s": 0.0, "remaining_mib": 0.0, "iteration": 0, "post_copy": False}
"""No migration runs: nothing is measured."""


def advance(p: MoveProgress, event: MoveEvent, *, max_attempts: int = 1) -> MoveProgress:
    """The progress after ``event``; ``max_attempts`` bounds the migration attempts per VM."""
    S = ProgressState
    match event:
        case InFlight(target, attempt, pct, returning, dirty_rate, remaining, iteration, post_copy):
            return replace(
                p,
                state=S.RETURNING if returning else S.MIGRATING,
                target=target,
                attempts=max(p.attempts, attempt),
                tried=p.tried if returning else _tried(p, target),
                progress_pct=pct,
                message="",
                dirty_rate_mib_s=dirty_rate,
                remaining_mib=remaining,
                iteration=iteration,
                post_copy=post_copy,
            )
        case Arrived():
            return replace(p, state=S.MIGRATED, progress_pct=100.0, message="", **_IDLE)
        case AttemptFailed(error, runs_on):
            used = f"; {p.attempts} attempt(s) used, the VM keeps running on {runs_on}"
            failed = replace(p, progress_pct=0.0, **_IDLE)
            return _failed(failed, max_attempts, error, "; retrying on another host", used)
        case Began(target):
            return replace(
                p,
                state=S.MIGRATING,
                target=target,
                attempts=p.attempts + 1,
                tried=(*p.tried, target),
                progress_pct=0.0,
                message="",
            )
        case TargetRefused(target, error):
            tried = replace(p, target=target, attempts=p.attempts + 1, tried=(*p.tried, target))
            return _failed(tried, max_attempts, error, "", "")
        case NoSlot(why):
            return replace(p, state=S.WAITING_FOR_SLOT, message=why)
        case NoTarget(why):
            after = f" (after {p.attempts} failed attempt(s))" if p.attempts else ""
            return replace(p, state=S.FAILED, message=f"{why}{after}")
        case NotReady(why):
            return replace(p, state=S.PENDING, message=why)
        case StopAsked(why):
            return replace(p, state=S.STOPPING, message=why)
        case StoppedHere():
            return replace(p, state=S.STOPPED, message="stopped by maintenance; starts again on cancel")
        case Left():
            if p.state is not S.PENDING:
                return p  # what happened to it before it stopped stays on record
            return replace(p, state=S.LEFT, message="not running")
        case Blocked(why):
            if p.state is S.FAILED:  # a failed VM stays Failed, with its own reason
                return replace(p, message=p.message or why)
            return replace(p, state=S.BLOCKED, message=why)
        case ReturnBegan(target):
            return replace(p, state=S.RETURNING, target=target, message="")
        case Returned(home):
            return replace(p, state=S.RETURNED, message=f"back on {home}")
        case NotReturned(why):
            return replace(p, state=S.NOT_RETURNED, message=why)
        case _:
            assert_never(event)


def retrying(p: MoveProgress) -> bool:
    """A failed attempt is being retried (the host shows ErrorInPrepareForMaintenance meanwhile)."""
    return p.state is ProgressState.RETRYING or (p.attempts > 1 and p.state in UNFINISHED)


def observed(
    p: MoveProgress, flight: InFlight | None, runs_on: str | None, error: str, *, max_attempts: int
) -> MoveProgress:
    """``p`` brought up to date with its VM: the migration under way (``flight``, from the VM's
    intent), or where the one ``p`` followed left the VM (``runs_on``; ``error`` says why it failed)."""
    if flight is not None:
        return advance(p, flight)
    if p.state is ProgressState.MIGRATING and p.target:
        outcome: MoveEvent = Arrived() if runs_on == p.target else AttemptFailed(error, runs_on)
        return advance(p, outcome, max_attempts=max_attempts)
    return p
