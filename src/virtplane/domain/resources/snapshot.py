"""A VM snapshot: the VM's spec, its disks and (optionally) its memory, captured."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from virtplane.domain.base import Condition, Name, Resource, Strict
from virtplane.domain.resources.virtual_machine import VirtualMachineSpec


class SnapshotPhase(StrEnum):
    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    READY = "Ready"
    FAILED = "Failed"


class SnapshotConsistency(StrEnum):
    FILESYSTEM_FROZEN = "FilesystemFrozen"  # the guest's agent froze its filesystems around the copy
    CRASH_CONSISTENT = "CrashConsistent"  # as after a power cut: the guest's journal replays
    POWERED_OFF = "PoweredOff"  # the VM was stopped: nothing was in flight


class VirtualMachineSnapshotSpec(Strict):
    vm: Name
    with_memory: bool = False
    required_consistency: bool = False


class CapturedVM(BaseModel):
    spec: VirtualMachineSpec
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class DiskSnapshot(BaseModel):
    volume: str
    handle: str = Field(description="Driver-owned reference to the saved disk content.")
    size_gib: int = 0


class VirtualMachineSnapshotStatus(BaseModel):
    phase: SnapshotPhase = SnapshotPhase.PENDING
    captured: CapturedVM | None = None
    disk_snapshots: list[DiskSnapshot] = Field(default_factory=list)
    memory_handle: str | None = None
    power_state: Literal["Running", "Stopped"] | None = None
    host: str | None = None
    consistency: SnapshotConsistency | None = Field(
        default=None, description="How consistent the disks are (set once the disks are saved)."
    )
    consistency_reason: str = ""
    message: str = ""
    conditions: list[Condition] = Field(default_factory=list)


class VirtualMachineSnapshot(Resource):
    KIND: ClassVar[str] = "VirtualMachineSnapshot"
    PLURAL: ClassVar[str] = "snapshots"
    spec: VirtualMachineSnapshotSpec
    status: VirtualMachineSnapshotStatus = Field(default_factory=VirtualMachineSnapshotStatus)
