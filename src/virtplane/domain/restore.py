"""The steps of a restore (DESIGN.md §4), in order: the table the restore handler runs as its
chain (``controllers.restore.RestoreHandler.chain``), one handler per row after NEW.

A Restore operation records the step it reached in ``status.step``; after a crash the
handler resumes from there. Each step is idempotent, so a step seen again is done again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["STEPS", "RestoreStep", "Step", "next_step", "not_past"]


class RestoreStep(StrEnum):
    NEW = ""  # not started
    VALIDATE = "Validate"  # SnapshotReady and Validate of §4, one step
    ENTER_MAINTENANCE = "EnterMaintenance"
    PROCESS_RESTORE = "ProcessRestore"
    EXIT_MAINTENANCE = "ExitMaintenance"
    RESTORE_POWER_STATE = "RestorePowerState"


@dataclass(frozen=True)
class Step:
    step: RestoreStep
    does: str
    touches_vm: bool
    """Whether the step changes the VM or its disks; until one does, a failure changes nothing."""


STEPS: tuple[Step, ...] = (
    Step(RestoreStep.NEW, "not started", False),
    Step(
        RestoreStep.VALIDATE,
        "the snapshot exists and is Ready; disks, names and capacity are available; DryRun stops here",
        False,
    ),
    Step(
        RestoreStep.ENTER_MAINTENANCE,
        "record restore-power-state, the hold and a system stop in one write, then wait for the "
        "stop and remove the domain",
        True,
    ),
    Step(RestoreStep.PROCESS_RESTORE, "revert every disk; overwrite spec, labels and annotations", True),
    Step(RestoreStep.EXIT_MAINTENANCE, "release the hold (after a failure too); the intent stays", True),
    Step(
        RestoreStep.RESTORE_POWER_STATE,
        "wait until the VM controller turned the intent into a start or a kept stop",
        True,
    ),
)
_ORDER = {row.step: i for i, row in enumerate(STEPS)}


def not_past(step: RestoreStep, limit: RestoreStep) -> bool:
    """The operation has not gone beyond ``limit`` yet (it may be at it)."""
    return _ORDER[step] <= _ORDER[limit]


def next_step(step: RestoreStep) -> RestoreStep | None:
    """The step after ``step``; None after the last."""
    index = _ORDER[step] + 1
    return STEPS[index].step if index < len(STEPS) else None
