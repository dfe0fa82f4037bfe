"""The driver's live-migration operations: a migration belongs to the hypervisors once started."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from virtplane.drivers.base import DomainSpec


class MigrationPhase(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class MigrationJob:
    domain: str
    target_uri: str
    phase: MigrationPhase
    data_total_mib: float = 0.0
    data_processed_mib: float = 0.0
    data_remaining_mib: float = 0.0
    iteration: int = 0
    error: str = ""
    memory_remaining_mib: float = 0.0
    dirty_rate_mib_s: float = 0.0  # what the guest dirties now, as the hypervisor measures it
    throttle_pct: int = 0  # how far auto-converge slows the guest's vCPUs
    post_copy: bool = False  # switched to post-copy: the guest runs on the target, memory split

    @property
    def finished(self) -> bool:
        return self.phase is not MigrationPhase.RUNNING


@dataclass(frozen=True)
class MigrationRequest:
    domain: str
    target_uri: str
    copy_disks: tuple[str, ...] = ()  # paths of local disks to copy; shared disks are never copied
    bandwidth_mib_s: int | None = None
    spec: DomainSpec | None = field(default=None)  # lets the target pre-create copied disks
    migration_address: str | None = None  # where the target receives the data (its Host spec)
    auto_converge: bool = False  # throttle the guest's vCPUs while pre-copy does not converge
    post_copy: bool = False  # allow ``start_post_copy`` later (VIR_MIGRATE_POSTCOPY)
    max_downtime_ms: int | None = None  # the longest pause the switch-over may take


class MigrationOperations(Protocol):
    """Part of ``HypervisorDriver``: outgoing live migrations from one host."""

    async def migrate(self, request: MigrationRequest) -> None:
        """Start a live migration and return; progress comes from ``migration_job``."""

    async def migration_job(self, name: str) -> MigrationJob | None:
        """The outgoing migration of ``name`` from this host, as the hypervisor reports it.

        A migration belongs to the hypervisors once started and goes on without the process
        that started it, so this asks the hypervisor, not the driver's memory: after a restart
        of the control plane a migration still running is reported RUNNING (its
        ``target_uri`` may then be ""). None when no migration of the domain is known here.
        """

    async def abort_migration(self, name: str) -> None:
        """Abort the outgoing migration of ``name``, also one started by an earlier process."""

    async def start_post_copy(self, name: str) -> None:
        """Switch the outgoing migration of ``name`` (started with ``post_copy``) to post-copy:
        the guest runs on the target from now on and pulls the pages it still lacks. Idempotent."""
