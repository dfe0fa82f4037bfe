"""A volume: a VM disk in a pool, empty or copied from an image or a snapshot."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, Field

from virtplane.domain.base import Name, Resource, Strict


class VolumeSource(Strict):
    image: Name | None = Field(default=None, description="The name of an Image (kind Disk) to copy.")
    snapshot: Name | None = Field(default=None, description="A VirtualMachineSnapshot to copy a disk from.")


class VolumeSpec(Strict):
    pool: Name
    size_gib: int = Field(ge=1, le=64 * 1024)
    source: VolumeSource | None = None


class VolumePhase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"


class VolumeStatus(BaseModel):
    phase: VolumePhase = VolumePhase.PENDING
    path: str = ""
    file: str = Field(default="", description="The file virtplane created for this volume in its pool.")
    size_gib: int = 0
    attached_vm: str | None = None
    message: str = ""


VOLUME_FINALIZER = "virtplane.io/volume"
"""The volume's file in its pool is deleted before the Volume is."""


class Volume(Resource):
    KIND: ClassVar[str] = "Volume"
    PLURAL: ClassVar[str] = "volumes"
    FINALIZERS_ON_CREATE: ClassVar[tuple[str, ...]] = (VOLUME_FINALIZER,)
    spec: VolumeSpec
    status: VolumeStatus = Field(default_factory=VolumeStatus)
