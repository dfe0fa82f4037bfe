"""An operation on a VM: start, stop, restart, migrate, evict, restore."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, Field, model_validator

from virtplane.domain.base import Condition, Name, Resource, Strict
from virtplane.domain.vocabulary import RestoreMode


class OperationType(StrEnum):
    START = "Start"
    STOP = "Stop"
    RESTART = "Restart"
    MIGRATE = "Migrate"
    EVICT = "Evict"
    RESTORE = "Restore"


class RestoreSpec(Strict):
    """Where a restore reads from: a snapshot or a backup (one of the two)."""

    snapshot: Name | None = Field(default=None, description="The VirtualMachineSnapshot to restore.")
    backup: Name | None = Field(
        default=None,
        description="The VirtualMachineBackup to restore (any point of a chain: full or incremental).",
    )
    disks: list[Name] = Field(
        default_factory=list,
        max_length=64,
        description="With ``backup``: only these Volumes are restored and the VM's spec stays as it "
        "is; empty: every disk of the backup, and the VM's spec, labels and annotations as it saved them.",
    )
    mode: RestoreMode = RestoreMode.STRICT

    @model_validator(mode="after")
    def _one_source(self) -> RestoreSpec:
        if (self.snapshot is None) == (self.backup is None):
            raise ValueError("name one source: spec.restore.snapshot or spec.restore.backup")
        if self.disks and self.backup is None:
            raise ValueError("spec.restore.disks is only for a restore from a backup")
        return self


class MigrateSpec(Strict):
    target_host: Name | None = None


class OperationPhase(StrEnum):
    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    SUPERSEDED = "Superseded"

    @property
    def finished(self) -> bool:
        return self in (OperationPhase.COMPLETED, OperationPhase.FAILED, OperationPhase.SUPERSEDED)


class VirtualMachineOperationSpec(Strict):
    vm: Name
    type: OperationType
    force: bool = False
    restore: RestoreSpec | None = None
    migrate: MigrateSpec | None = None

    @model_validator(mode="after")
    def _check_params(self) -> VirtualMachineOperationSpec:
        if self.type is OperationType.RESTORE and self.restore is None:
            raise ValueError("a Restore operation needs spec.restore (its snapshot or backup)")
        if self.type is not OperationType.RESTORE and self.restore is not None:
            raise ValueError("spec.restore is only for type Restore")
        if self.migrate is not None and self.type not in (OperationType.MIGRATE, OperationType.EVICT):
            raise ValueError("spec.migrate is only for type Migrate or Evict")
        return self


class VirtualMachineOperationStatus(BaseModel):
    phase: OperationPhase = OperationPhase.PENDING
    step: str = ""
    conditions: list[Condition] = Field(default_factory=list)
    progress: dict[str, Any] = Field(default_factory=dict)
    message: str = ""
    reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None


class VirtualMachineOperation(Resource):
    KIND: ClassVar[str] = "VirtualMachineOperation"
    PLURAL: ClassVar[str] = "operations"
    spec: VirtualMachineOperationSpec
    status: VirtualMachineOperationStatus = Field(default_factory=VirtualMachineOperationStatus)
