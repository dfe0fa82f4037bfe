"""``locate``: where a VM in live migration is, from what the two hosts say (the table)."""

from __future__ import annotations

import pytest

from virtplane.controllers.migration_outcome import Outcome, Side, locate
from virtplane.drivers.base import DomainInfo, DomainState, MigrationJob, MigrationPhase

D = "virtplane-x"


def job(phase: MigrationPhase, target: str = "sim://b") -> MigrationJob:
    return MigrationJob(D, target, phase, error="boom" if phase is MigrationPhase.FAILED else "")


def on(state: DomainState, *, migrated_away: bool = False) -> Side:
    return Side(True, DomainInfo(D, "x", state, migrated_away=migrated_away))


NOTHING = Side(True, None)  # asked: no such domain there (also a fenced host)
AWAY = Side(False)  # could not be asked
RUNNING, PAUSED, SHUTOFF = DomainState.RUNNING, DomainState.PAUSED, DomainState.SHUTOFF
INCOMING, MIGRATING = DomainState.INCOMING, DomainState.MIGRATING

TABLE = [
    # (case, job on the source, source, target, outcome)
    ("job running", job(MigrationPhase.RUNNING), on(MIGRATING), on(INCOMING), Outcome.RUNNING),
    ("job running, found after a restart", job(MigrationPhase.RUNNING, ""), on(RUNNING), on(INCOMING),
     Outcome.RUNNING),
    ("job completed", job(MigrationPhase.COMPLETED), NOTHING, on(RUNNING), Outcome.ARRIVED),
    ("completed while nobody watched", None, NOTHING, on(RUNNING), Outcome.ARRIVED),
    ("arrived paused", None, NOTHING, on(PAUSED), Outcome.ARRIVED),
    ("arrived, source leftover off", None, on(SHUTOFF), on(RUNNING), Outcome.ARRIVED),
    ("arrived, source cannot be asked", None, AWAY, on(RUNNING), Outcome.ARRIVED),
    ("source says migrated away, target away", None, on(SHUTOFF, migrated_away=True), AWAY, Outcome.ARRIVED),
    ("switch-over: live on both", None, on(PAUSED), on(RUNNING), Outcome.UNKNOWN),
    ("still arriving, no job on the source", None, on(RUNNING), on(INCOMING), Outcome.FAILED),
    ("job failed", job(MigrationPhase.FAILED), on(RUNNING), NOTHING, Outcome.FAILED),
    ("job aborted", job(MigrationPhase.ABORTED), on(RUNNING), NOTHING, Outcome.FAILED),
    ("no job, still on the source", None, on(RUNNING), NOTHING, Outcome.FAILED),
    ("no job, on the source, target away", None, on(RUNNING), AWAY, Outcome.FAILED),
    ("no job, paused on the source, target away", None, on(PAUSED), AWAY, Outcome.UNKNOWN),
    ("source away, not on the target", None, AWAY, NOTHING, Outcome.UNKNOWN),
    ("source away, arriving on the target", None, AWAY, on(INCOMING), Outcome.UNKNOWN),
    ("both away", None, AWAY, AWAY, Outcome.UNKNOWN),
    ("source fenced, not on the target", None, NOTHING, NOTHING, Outcome.FAILED),
    ("off on the source, target away", None, on(SHUTOFF), AWAY, Outcome.UNKNOWN),
    ("live nowhere", None, on(SHUTOFF), NOTHING, Outcome.FAILED),
]  # fmt: skip


@pytest.mark.parametrize(("case", "job_", "source", "target", "outcome"), TABLE, ids=[t[0] for t in TABLE])
def test_locate(case: str, job_: MigrationJob | None, source: Side, target: Side, outcome: Outcome) -> None:
    where = locate(job_, source, target)
    assert where.outcome is outcome, where.why
    if outcome is not Outcome.RUNNING:
        assert where.why, "every outcome but RUNNING says why"


def test_a_guess_is_never_made_while_a_host_cannot_be_asked() -> None:
    """Property over the table's sides: FAILED (which lets the VM be started again where it was)
    is only ever answered when both hosts answered, or the source answered that it runs the VM."""
    sides = [NOTHING, AWAY, *(on(s) for s in DomainState), on(SHUTOFF, migrated_away=True)]
    for source in sides:
        for target in sides:
            where = locate(None, source, target)
            if where.outcome is Outcome.FAILED:
                assert source.reachable, (source, target)
                assert target.reachable or source.live, (source, target)
