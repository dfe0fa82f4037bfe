"""A volume: a VM disk in a pool, empty or copied from an image, a snapshot or a backup."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field, model_validator

from virtplane.domain.base import Name, Resource, Strict
from virtplane.domain.sizes import GIB, accepts_units, renamed_size

MAX_VOLUME_GIB = 64 * 1024


class VolumeSource(Strict):
    image: Name | None = Field(default=None, description="The name of an Image (kind Disk) to copy.")
    snapshot: Name | None = Field(
        default=None,
        description="A VirtualMachineSnapshot to copy a disk from: the disk of ``volume`` as it saved it.",
    )
    volume: Name | None = Field(
        default=None,
        description="Another Volume to copy whole (a disk of a template or of a stopped VM): a clone; "
        "with ``snapshot`` or ``backup``, the volume whose saved disk is copied.",
    )
    backup: Name | None = Field(
        default=None,
        description="A VirtualMachineBackup to copy a disk from: the disk of ``volume`` as the backup "
        "saw it (read through the backups it builds on).",
    )
    linked: bool = Field(
        default=False,
        description="A linked clone: a qcow2 overlay whose backing file is ``volume`` (a template's disk) "
        "or, with ``snapshot``, the disk it saved, in the same shared pool, instead of a full copy. "
        "That volume or snapshot cannot be deleted while a linked clone uses it.",
    )


class VolumeSpec(Strict):
    pool: Name
    size_gib: Annotated[int, accepts_units(GIB, ge=1, le=MAX_VOLUME_GIB)] = Field(
        ge=1,
        le=MAX_VOLUME_GIB,
        description="Size in GiB, or a size with a unit (20Gi, 1Ti); ``size: 20Gi`` also works.",
    )
    source: VolumeSource | None = None

    @model_validator(mode="before")
    @classmethod
    def _size_with_a_unit(cls, data: Any) -> Any:
        return renamed_size(data, "size", "size_gib")


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
