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
    snapshot: Name
    mode: RestoreMode = RestoreMode.STRICT


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
            raise ValueError("a Restore operation needs spec.restore.snapshot")
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
