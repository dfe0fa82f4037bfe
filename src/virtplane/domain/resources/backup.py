"""Backups (issue 36): where they go (``BackupTarget``, an admin's) and each backup of a VM
(``VirtualMachineBackup``, an operator's), full or incremental (``domain.backups``).

A target is a directory every host of its cluster sees (shared storage, an NFS export the
hosts mount), defined on each host as a pool: a backup's files are volumes of that pool, so no
operator ever names a path on a host. A backup captures the VM as a snapshot does (its spec,
its power state, how consistent its disks are) with its disks copied into the target: a full
backup holds whole disks, an incremental one what changed since the backup it builds on
(``status.base``), read through that one.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field

from virtplane.domain.backups import BackupMode
from virtplane.domain.base import Condition, Name, Resource, Strict
from virtplane.domain.names import DRIVER_POOL, HOST_PATH
from virtplane.domain.resources.snapshot import CapturedVM, SnapshotConsistency
from virtplane.domain.resources.storage_pool import MAX_POOL_GIB
from virtplane.domain.sizes import GIB, accepts_units


class BackupTargetSpec(Strict):
    cluster: Name = Field(default="default", description="Every host of this cluster sees the directory.")
    path: str = Field(
        max_length=1024,
        pattern=HOST_PATH.anchored,
        description="The directory on every host of the cluster (shared storage or a mounted export).",
    )
    capacity_gib: Annotated[int, accepts_units(GIB, ge=1, le=MAX_POOL_GIB)] = Field(
        ge=1, le=MAX_POOL_GIB, description="What backups may take there, in GiB or with a unit (2Ti)."
    )
    driver_pool: str = Field(
        default="",
        max_length=255,
        pattern=DRIVER_POOL.anchored,
        description="The pool's name on the hypervisors (default: backups-NAME).",
    )


class BackupTargetStatus(BaseModel):
    capacity_gib: int = 0
    used_gib: int = Field(default=0, description="What the target's backups take (their disks' sizes).")
    free_gib: int = 0
    healthy: bool = Field(default=False, description="Every host of the cluster reached the directory.")
    reachable_hosts: list[str] = Field(default_factory=list)
    unreachable_hosts: dict[str, str] = Field(
        default_factory=dict, description="Host -> why it could not reach the directory."
    )
    message: str = ""
    conditions: list[Condition] = Field(default_factory=list)


class BackupTarget(Resource):
    KIND: ClassVar[str] = "BackupTarget"
    PLURAL: ClassVar[str] = "backuptargets"
    spec: BackupTargetSpec
    status: BackupTargetStatus = Field(default_factory=BackupTargetStatus)


def target_pool_name(target: BackupTarget) -> str:
    return target.spec.driver_pool or f"backups-{target.metadata.name}"


class BackupPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class VirtualMachineBackupSpec(Strict):
    vm: Name
    target: Name
    full: bool = Field(default=False, description="A full backup even where an incremental one could be.")


class BackupDisk(BaseModel):
    volume: str = Field(description="The VM's Volume.")
    backup_volume: str = Field(description="The backup's volume of this disk in the target's pool.")
    base_volume: str | None = Field(default=None, description="An incremental's: the volume it overlays.")
    size_bytes: int = 0
    bytes: int = Field(default=0, description="What the backup wrote of this disk.")


VERIFY_REQUESTED = "virtplane.io/verify-requested"
"""A system annotation on a backup: a verification asked for (its value names the request)."""


class VerificationResult(StrEnum):
    OK = "Ok"
    FAILED = "Failed"


class BackupVerification(BaseModel):
    requested: str = Field(
        default="", description="The request it answers (the verify-requested annotation)."
    )
    verified_at: datetime | None = None
    result: VerificationResult | None = None
    message: str = ""


class VirtualMachineBackupStatus(BaseModel):
    phase: BackupPhase = BackupPhase.PENDING
    mode: BackupMode | None = None
    mode_reason: str = ""
    base: str | None = Field(default=None, description="The backup an incremental one builds on.")
    checkpoint: str | None = Field(
        default=None, description="Made by this backup on the VM's host (none for a stopped VM's copy)."
    )
    checkpoint_definitions: list[str] = Field(
        default_factory=list,
        description="Its checkpoint's definition as its host held it once it succeeded: redefined "
        "on the VM's next host after a live migration, so that the next backup is incremental.",
    )
    host: str | None = None
    begun: bool = Field(default=False, description="The hypervisor's backup job was started.")
    cleanup_pending: bool = Field(
        default=False, description="A failed backup's checkpoint and volumes are still to be removed."
    )
    consistency: SnapshotConsistency | None = None
    consistency_reason: str = ""
    disks: list[BackupDisk] = Field(default_factory=list)
    total_bytes: int = 0
    processed_bytes: int = 0
    captured: CapturedVM | None = None
    power_state: Literal["Running", "Stopped"] | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    verification: BackupVerification | None = Field(
        default=None, description="The last check of the backup's files on the target (backup verify)."
    )
    message: str = ""
    conditions: list[Condition] = Field(default_factory=list)


class VirtualMachineBackup(Resource):
    KIND: ClassVar[str] = "VirtualMachineBackup"
    PLURAL: ClassVar[str] = "backups"
    spec: VirtualMachineBackupSpec
    status: VirtualMachineBackupStatus = Field(default_factory=VirtualMachineBackupStatus)
