"""Host maintenance: draining a host of its VMs, with a plan and per-VM progress."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, Field

from virtplane.domain.base import Name, Resource, Strict
from virtplane.domain.progress import PlanAction, ProgressState
from virtplane.domain.vocabulary import MaintenanceStrategy


class MaintenancePhase(StrEnum):
    PLANNED = "Planned"  # dry run: the plan only
    DRAINING = "Draining"
    COMPLETED = "Completed"  # the host is in Maintenance
    FAILED = "Failed"  # the host is in ErrorInMaintenance
    CANCELLING = "Cancelling"
    CANCELLED = "Cancelled"


class HostMaintenanceSpec(Strict):
    host: Name
    strategy: MaintenanceStrategy | None = Field(
        default=None, description="Overrides the setting host.maintenance.local.storage.strategy."
    )
    dry_run: bool = False
    cancel: bool = Field(default=False, description="Set to cancel: the host returns to Enabled.")
    return_vms: bool | None = Field(
        default=None,
        description="On cancel: migrate back the VMs that left. Overrides the setting host.maintenance.return_vms.",
    )
    request: int = Field(
        default=1, ge=1, description="Bumped by each repeated request; a new value retries a failed drain."
    )


class MaintenancePlanItem(BaseModel):
    vm: str
    action: PlanAction
    target: str | None = None
    reason: str = ""
    risk: str = ""  # e.g. a migration that may not converge


class MaintenanceVMProgress(BaseModel):
    state: ProgressState = ProgressState.PENDING  # changed only through domain.progress.advance
    target: str | None = None
    attempts: int = 0
    tried: list[str] = Field(default_factory=list)
    progress_pct: float = 0.0
    message: str = ""
    dirty_rate_mib_s: float = 0.0  # of the migration under way, as the hypervisor measures it
    remaining_mib: float = 0.0  # memory it still has to send
    iteration: int = 0  # its memory pass
    post_copy: bool = False  # switched to post-copy: the guest runs on the target


class HostMaintenanceStatus(BaseModel):
    phase: MaintenancePhase = MaintenancePhase.DRAINING
    strategy: MaintenanceStrategy | None = None
    plan: list[MaintenancePlanItem] = Field(default_factory=list)
    progress: dict[str, MaintenanceVMProgress] = Field(default_factory=dict)
    stopped_vms: list[str] = Field(default_factory=list)
    migrated_vms: dict[str, str] = Field(default_factory=dict)  # vm -> target, for return_vms
    blocking: list[str] = Field(default_factory=list)
    message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    observed_generation: int = 0


class HostMaintenance(Resource):
    KIND: ClassVar[str] = "HostMaintenance"
    PLURAL: ClassVar[str] = "maintenances"
    spec: HostMaintenanceSpec
    status: HostMaintenanceStatus = Field(default_factory=HostMaintenanceStatus)
