"""A storage pool: VM volumes or an image library, on one host or shared by several."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import BaseModel, Field, model_validator

from virtplane.domain.base import Name, Resource, Strict
from virtplane.domain.names import DRIVER_POOL, HOST_PATH
from virtplane.domain.sizes import GIB, accepts_units


class PoolKind(StrEnum):
    LOCAL = "local"
    SHARED = "shared"


class PoolContent(StrEnum):
    """What a pool holds: VM volumes (virtplane's own files) or an image library (an admin's files)."""

    VOLUMES = "volumes"
    IMAGES = "images"


MAX_POOL_GIB = 1024 * 1024


class StoragePoolSpec(Strict):
    kind: PoolKind
    content: PoolContent = Field(
        default=PoolContent.VOLUMES,
        description="volumes: VM disks that virtplane creates; images: an image library whose files an "
        "admin places and names with Image resources. Cannot change once the pool exists.",
    )
    host: Name | None = Field(default=None, description="The host of a local pool.")
    hosts: list[Name] = Field(default_factory=list, description="Hosts that see a shared pool.")
    cluster: Name | None = Field(default=None, description="All hosts of this cluster see the shared pool.")
    capacity_gib: Annotated[int, accepts_units(GIB, ge=1, le=MAX_POOL_GIB)] = Field(
        ge=1, le=MAX_POOL_GIB, description="Capacity in GiB, or a size with a unit (500Gi, 2Ti)."
    )
    driver_pool: str = Field(
        default="",
        max_length=255,
        pattern=DRIVER_POOL.anchored,
        description="Pool name on the hypervisor (default: the resource name). Local pools with the "
        "same driver_pool on different hosts are where block migration copies disks to.",
    )
    path: str | None = Field(
        default=None,
        max_length=1024,
        pattern=HOST_PATH.anchored,
        description="Directory of the pool on the host (libvirt dir pools).",
    )

    @model_validator(mode="after")
    def _check_scope(self) -> StoragePoolSpec:
        if self.kind is PoolKind.LOCAL:
            if not self.host:
                raise ValueError("a local pool needs spec.host")
            if self.hosts or self.cluster:
                raise ValueError("a local pool takes spec.host, not spec.hosts or spec.cluster")
        else:
            if self.host:
                raise ValueError("a shared pool takes spec.hosts or spec.cluster, not spec.host")
            if not self.hosts and not self.cluster:
                raise ValueError("a shared pool needs spec.hosts or spec.cluster")
        return self


class StoragePoolStatus(BaseModel):
    capacity_gib: int = 0
    used_gib: int = 0
    reachable_hosts: list[str] = Field(default_factory=list)


class StoragePool(Resource):
    KIND: ClassVar[str] = "StoragePool"
    PLURAL: ClassVar[str] = "storagepools"
    spec: StoragePoolSpec
    status: StoragePoolStatus = Field(default_factory=StoragePoolStatus)
