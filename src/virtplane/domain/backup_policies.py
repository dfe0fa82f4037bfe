"""A backup policy's rules, pure (issue 36): how its backups are named, and which of them its
retention removes without breaking a chain that a kept backup still reads through.

``domain.backups.prune`` gives each finished backup of a VM its verdict; a policy removes only
its own backups from it, and never one that something kept needs: a backup still running, one
an operator took by hand (not the policy's to prune), or one whose failure is the VM's newest
word (it stays visible until a good backup follows) keeps the whole chain under it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from virtplane.domain.backups import BackupPoint, Retention, prune

MAX_NAME = 63


def policy_backup_name(vm: str, window: datetime) -> str:
    """The backup a policy makes of ``vm`` for the window that fired at ``window``: the same
    name every time, so a policy that crashed after creating it finds it rather than a twin."""
    stamp = window.strftime("%Y%m%d-%H%M" if window.second == 0 else "%Y%m%d-%H%M%S")
    name = f"{vm}-{stamp}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(vm.encode()).hexdigest()[:8]
    head = vm[: MAX_NAME - len(stamp) - len(digest) - 2].rstrip("-")
    return f"{head}-{digest}-{stamp}"


class Outcome(StrEnum):
    GOOD = "Good"  # succeeded (and not failed verification)
    FAILED = "Failed"  # failed, or succeeded but failed verification
    IN_PROGRESS = "InProgress"  # pending or running


@dataclass(frozen=True)
class KeptBackup:
    """One backup of one VM on the policy's target, as its retention sees it."""

    name: str
    taken_at: datetime
    outcome: Outcome
    ours: bool  # made by this policy (only those are pruned)
    base: str | None = None


@dataclass(frozen=True)
class Expiry:
    name: str
    reason: str


def expired(backups: Sequence[KeptBackup], retention: Retention) -> list[Expiry]:
    """The policy's backups of one VM that its retention removes, each above the backups it
    builds on (remove them in this order)."""
    finished = [b for b in backups if b.outcome is not Outcome.IN_PROGRESS]
    verdicts = {
        v.name: v
        for v in prune(
            [BackupPoint(b.name, b.taken_at, b.outcome is Outcome.GOOD, b.base) for b in finished], retention
        )
    }
    newest_good = max((b.taken_at for b in backups if b.outcome is Outcome.GOOD), default=None)
    kept: set[str] = set()
    for b in backups:
        verdict = verdicts.get(b.name)
        if (
            verdict is None  # still in progress
            or verdict.keep
            or not b.ours
            or (b.outcome is Outcome.FAILED and (newest_good is None or b.taken_at > newest_good))
        ):
            kept.add(b.name)
    by_name = {b.name: b for b in backups}
    for name in list(kept):
        base = by_name[name].base
        while base is not None and base in by_name and base not in kept:
            kept.add(base)
            base = by_name[base].base
    gone = sorted(
        (b for b in backups if b.name not in kept), key=lambda b: (b.taken_at, b.name), reverse=True
    )
    return [Expiry(b.name, verdicts[b.name].reason) for b in gone]
