"""Where a VM in live migration is: read from the hypervisors, never from memory.

A live migration belongs to the hypervisors once started: libvirt carries a
peer-to-peer migration to its end even when the process that asked for it dies.
So after a restart or a leader change the control plane cannot know how a
migration ended from anything it remembers; it asks the source (its migration
job, its domain) and the target (its domain), and ``locate`` turns the answers
into one of four outcomes:

- ``RUNNING``: the source still runs the migration; follow its progress.
- ``ARRIVED``: the VM runs on the target (finalise: ``status.host`` = target).
- ``FAILED``: the migration is over and the VM is not on the target; it stays
  on the source (or, if it is nowhere, the run policy decides there).
- ``UNKNOWN``: the answers do not say where the VM runs (a host that cannot be
  asked). Nothing is defined, started or undefined anywhere until they do; there
  is no timeout on this, because a guess here is how one VM ends up on two hosts.

Pure: the observations are passed in; ``tests/controllers/test_migration_outcome.py``
is the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from virtplane.domain.phases import LIVE_STATES, DomainState
from virtplane.drivers.base import DomainInfo, MigrationJob, MigrationPhase


class Outcome(StrEnum):
    RUNNING = "running"
    ARRIVED = "arrived"
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Side:
    """What one host said about the VM's domain: ``reachable`` False means it could not be asked.

    A host confirmed powered off (fenced) is known to run nothing: ``Side(True, None)``.
    """

    reachable: bool
    info: DomainInfo | None = None

    @property
    def live(self) -> bool:
        return self.reachable and self.info is not None and self.info.state in LIVE_STATES

    @property
    def arrived(self) -> bool:
        """The domain runs here and is not still arriving."""
        return self.live and self.info is not None and self.info.state is not DomainState.INCOMING


@dataclass(frozen=True)
class Location:
    outcome: Outcome
    why: str = ""


def locate(job: MigrationJob | None, source: Side, target: Side) -> Location:
    """Where the VM is, from the source's migration job and both hosts' view of the domain."""
    if job is not None and job.phase is MigrationPhase.RUNNING:
        return Location(Outcome.RUNNING)
    if job is not None and job.phase is MigrationPhase.COMPLETED:
        return Location(Outcome.ARRIVED, "the source reports the migration completed")
    if target.arrived:
        if source.live:
            # libvirt resumes the target only after pausing the source, and then kills the
            # source's copy: both live is the instant of the switch-over
            return Location(Outcome.UNKNOWN, "the domain is live on both hosts (switch-over)")
        return Location(Outcome.ARRIVED, "the domain runs on the target")
    if source.reachable and source.info is not None and source.info.migrated_away:
        return Location(Outcome.ARRIVED, "the source says the domain migrated away")
    if job is not None:  # failed or aborted, as the hypervisor reported it
        return Location(Outcome.FAILED, f"{job.phase.value}: {job.error or 'no reason given'}")
    if not source.reachable:
        return Location(Outcome.UNKNOWN, "the source cannot be asked and the domain is not on the target")
    if source.live:
        paused = source.info is not None and source.info.state is DomainState.PAUSED
        if not target.reachable and paused:
            return Location(Outcome.UNKNOWN, "the target cannot be asked and the source's copy is paused")
        return Location(
            Outcome.FAILED, "the migration ended on the source and the domain is not on the target"
        )
    if not target.reachable:
        return Location(Outcome.UNKNOWN, "the domain is off on the source and the target cannot be asked")
    return Location(Outcome.FAILED, "the domain stopped during the migration: it is live on neither host")


__all__ = ["Location", "Outcome", "Side", "locate"]
