"""Which operations may run on a VM, and which active one a new one supersedes (DESIGN.md §4).

Two tables, as data: ``APPLICABLE`` (type → policies and phases it applies to,
with the refusal message otherwise) and ``SUPERSEDES`` (new → active it replaces).
``admit`` is the only function that reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from virtplane.domain.resources import (
    OperationPhase,
    OperationType,
    RunPolicy,
    VirtualMachineOperation,
    VMPhase,
)

ALL_POLICIES = frozenset(RunPolicy)
ALL_PHASES = frozenset(VMPhase)
_MANUAL_LIKE = frozenset({RunPolicy.MANUAL, RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY})


@dataclass(frozen=True)
class Applicability:
    policies: frozenset[RunPolicy]
    phases: frozenset[VMPhase]
    policy_refusals: dict[RunPolicy, str]


APPLICABLE: dict[OperationType, Applicability] = {
    OperationType.START: Applicability(
        _MANUAL_LIKE,
        frozenset({VMPhase.STOPPED}),
        {
            RunPolicy.ALWAYS_ON: "the VM is always on: its run policy AlwaysOn starts it by itself",
            RunPolicy.ALWAYS_OFF: "the run policy is AlwaysOff: change the run policy to start it",
        },
    ),
    OperationType.STOP: Applicability(
        _MANUAL_LIKE,
        frozenset({VMPhase.RUNNING, VMPhase.STARTING, VMPhase.PAUSED, VMPhase.PENDING}),
        {
            RunPolicy.ALWAYS_ON: "the run policy AlwaysOn keeps the VM running: use Restart, or change the run policy",
            RunPolicy.ALWAYS_OFF: "the run policy AlwaysOff already keeps the VM stopped",
        },
    ),
    OperationType.RESTART: Applicability(
        ALL_POLICIES - {RunPolicy.ALWAYS_OFF},
        frozenset({VMPhase.RUNNING}),
        {RunPolicy.ALWAYS_OFF: "the run policy AlwaysOff keeps the VM stopped: there is nothing to restart"},
    ),
    OperationType.MIGRATE: Applicability(ALL_POLICIES, frozenset({VMPhase.RUNNING}), {}),
    OperationType.EVICT: Applicability(ALL_POLICIES, frozenset({VMPhase.RUNNING}), {}),
    OperationType.RESTORE: Applicability(ALL_POLICIES, ALL_PHASES, {}),
}


def _supersedes(new: OperationType, new_force: bool, active: OperationType, active_force: bool) -> bool:
    """The supersede rules of §4. Restore never supersedes and is never superseded."""
    if OperationType.RESTORE in (new, active):
        return False
    if new is OperationType.STOP and active is OperationType.START:
        # a new Stop supersedes a pending Start: one whose VM has not reached Running
        # (a completed Start is no longer active), including one stuck in start retries
        return True
    stop_or_restart = (OperationType.STOP, OperationType.RESTART)
    if new in stop_or_restart and new_force and active in stop_or_restart and not active_force:
        return True  # a forced Stop or Restart supersedes an unforced one
    return new in (OperationType.STOP, OperationType.RESTART) and active in (
        OperationType.MIGRATE,
        OperationType.EVICT,
    )


@dataclass(frozen=True)
class ActiveOperation:
    name: str
    type: OperationType
    force: bool
    started: bool  # InProgress (a Pending one has not acted yet)


@dataclass(frozen=True)
class Admission:
    allowed: bool
    reason: str = ""  # machine-readable refusal reason
    message: str = ""
    supersede: tuple[str, ...] = ()


def admit(
    type: OperationType,
    force: bool,
    run_policy: RunPolicy,
    phase: VMPhase,
    active: Sequence[ActiveOperation],
    *,
    held: bool = False,
) -> Admission:
    """Whether an operation of ``type`` may start on a VM in this state, and what it supersedes."""
    rule = APPLICABLE[type]
    if run_policy not in rule.policies:
        message = rule.policy_refusals.get(
            run_policy, f"{type.value} does not apply to run policy {run_policy.value}"
        )
        return Admission(False, "NotApplicable", f"{type.value} refused: {message}")
    superseded: list[str] = []
    for other in active:
        if _supersedes(type, force, other.type, other.force):
            superseded.append(other.name)
            continue
        return Admission(
            False,
            "OperationInProgress",
            f"{type.value} refused: operation {other.name} ({other.type.value}) is still active on this VM; "
            "wait for it to finish",
        )
    if held and type is not OperationType.RESTORE:
        return Admission(
            False, "VMInMaintenance", f"{type.value} refused: the VM is held by a restore or host maintenance"
        )
    if phase not in rule.phases and not superseded:  # a Stop replacing a Start applies to a Stopped VM
        allowed = ", ".join(sorted(p.value for p in rule.phases))
        return Admission(
            False,
            "NotApplicable",
            f"{type.value} refused: the VM is {phase.value}; {type.value} applies to {allowed}",
        )
    return Admission(True, supersede=tuple(superseded))


_NOT_CREATED_YET = datetime.max.replace(tzinfo=UTC)


def _order(op: VirtualMachineOperation) -> tuple[datetime, str]:
    """Creation order; one that admission is looking at, not stored yet, comes after all others."""
    return (op.metadata.created_at or _NOT_CREATED_YET, op.metadata.name)


def active_before(ops: list[VirtualMachineOperation], op: VirtualMachineOperation) -> list[ActiveOperation]:
    """Active operations that come before ``op``: InProgress ones, and Pending ones created earlier."""
    result = []
    for other in ops:
        if other.metadata.name == op.metadata.name or other.status.phase.finished:
            continue
        if other.status.phase is OperationPhase.PENDING and _order(other) > _order(op):
            continue
        result.append(
            ActiveOperation(
                other.metadata.name,
                other.spec.type,
                other.spec.force,
                other.status.phase is OperationPhase.IN_PROGRESS,
            )
        )
    return result
