"""A VM imported from an OVA: the archive received and checked as an upload is (SHA-256,
size, the library's quota), its OVF read (``services.image_ova``), each of its disks
converted to qcow2, before anything is written anywhere.

Each disk then becomes an Image in an image library (``<vm>-disk<N>``, written to every host
of the library as an upload is), and the VM is made by ``vm create``'s path, its volumes
copied from those Images into the chosen pool. A refusal at any of these steps leaves
nothing: the Images already written are deleted again (their files with them).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass

from virtplane.domain.errors import Invalid
from virtplane.domain.resources import Image, ImageFormat, ImageKind, ImagePhase, PoolContent, StoragePool
from virtplane.services.image_ova import OvaAppliance, extract_disk, is_ova, read_ovf
from virtplane.services.image_upload import ImageUploads, UploadPlan, convert_to_qcow2, digest_of

__all__ = ["OvaImports", "OvaRequest", "PreparedDisk", "PreparedOva"]

GIB = 1024**3
MAX_NAME = 56
"""A VM name taken from an OVF is cut to this, so that ``<name>-disk<N>`` is still a name."""
READY_TIMEOUT_S = 300.0
"""How long the hosts may take to find the written disks (each Image Ready) before the VM is made."""


@dataclass(frozen=True)
class OvaRequest:
    pool: str
    """The volume pool the VM's disks go to."""
    sha256: str
    name: str | None = None
    """The VM's name; else the OVF's, made a DNS label."""
    networks: tuple[str, ...] = ()
    library: str | None = None
    """The image library the disks go through; else the only one there is."""
    start: bool = False


@dataclass(frozen=True)
class PreparedDisk:
    plan: UploadPlan
    """Its Image (``<vm>-disk<N>``), as ``ImageUploads.write`` takes it."""
    path: str
    """The converted qcow2 file, on the server."""
    size_gib: int
    """Its volume's size: what the guest sees, rounded up."""


@dataclass(frozen=True)
class PreparedOva:
    name: str
    appliance: OvaAppliance
    disks: tuple[PreparedDisk, ...]
    nics: tuple[str, ...]
    """The network of each NIC, in order."""


class OvaImports:
    def __init__(self, uploads: ImageUploads) -> None:
        self.uploads = uploads

    def library(self, name: str | None) -> str:
        """The library named, or the only one; 422 when there is none or a choice to make."""
        if name is not None:
            return name
        libraries = [
            pool.metadata.name
            for pool in self.uploads.ctx.store.list_objects(StoragePool)
            if pool.spec.content is PoolContent.IMAGES
        ]
        if len(libraries) != 1:
            raise Invalid(
                "LibraryRequired",
                f"there are {len(libraries)} image libraries: name the one the disks go through (library)",
            )
        return libraries[0]

    def plan(self, request: OvaRequest, size: int) -> UploadPlan:
        """What the OVA's body must be (its SHA-256 and size, within the library's quota)."""
        spool_name = f"ova-upload-{uuid.uuid4().hex[:12]}"
        library = self.library(request.library)
        return self.uploads.plan(spool_name, library, ImageKind.DISK, ImageFormat.QCOW2, request.sha256, size)

    @contextlib.asynccontextmanager
    async def prepared(
        self, request: OvaRequest, plan: UploadPlan, chunks: AsyncIterable[bytes]
    ) -> AsyncIterator[PreparedOva]:
        """The OVA received, read and its disks converted (files removed after); raises the
        domain's errors before anything is written."""
        async with self.uploads.spooled(plan, chunks) as path:
            with open(path, "rb") as file:
                if not is_ova(file.read(512)):
                    raise Invalid(
                        "WrongFormat", "the content is not an OVA (a tar archive): nothing was written"
                    )
            appliance = await asyncio.to_thread(read_ovf, path)
            name = request.name or vm_name(appliance.name)
            nics = nic_networks(appliance.nics, request.networks)
            made: list[str] = []
            try:
                disks = []
                for index, disk in enumerate(appliance.disks):
                    vmdk, qcow2 = f"{path}.{index}.vmdk", f"{path}.{index}.qcow2"
                    made += [vmdk, qcow2]
                    await asyncio.to_thread(extract_disk, path, disk.member, vmdk)
                    virtual = await convert_to_qcow2(vmdk, qcow2)
                    os.unlink(vmdk)
                    digest, size = await asyncio.to_thread(digest_of, qcow2)
                    image = self.uploads.plan(
                        f"{name}-disk{index}",
                        plan.pool.metadata.name,
                        ImageKind.DISK,
                        ImageFormat.QCOW2,
                        digest,
                        size,
                    )
                    size_gib = max(1, math.ceil(max(virtual, disk.capacity_bytes or 0) / GIB))
                    disks.append(PreparedDisk(image, qcow2, size_gib))
                self.uploads.check_quota(plan.pool, sum(d.plan.size_bytes for d in disks))
                yield PreparedOva(name, appliance, tuple(disks), nics)
            finally:
                for leftover in made:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(leftover)

    async def ready(self, images: Sequence[Image]) -> None:
        """Once every host of the library has found each written disk (its Image Ready); 422
        when a host refused one, 504 past ``READY_TIMEOUT_S``."""
        store = self.uploads.ctx.store
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT_S
        waiting = [image.metadata.name for image in images]
        while waiting:
            found = {name: store.find(Image, name) for name in waiting}
            for name, image in found.items():
                if image is None or image.status.phase is ImagePhase.FAILED:
                    why = image.status.message if image is not None else "it was deleted"
                    raise Invalid("ImageFailed", f"image {name} of the OVA's disks failed: {why}")
            waiting = [
                n for n, i in found.items() if i is not None and i.status.phase is not ImagePhase.READY
            ]
            if waiting and loop.time() > deadline:
                raise TimeoutError(f"images {', '.join(waiting)} were not Ready in {READY_TIMEOUT_S:.0f} s")
            if waiting:
                await asyncio.sleep(0.1)  # polled: the Image controller writes it, in this process or another


def vm_name(ovf_name: str) -> str:
    """A VM name (a DNS label) from the virtual system's name in an OVF."""
    name = re.sub(r"[^a-z0-9-]+", "-", ovf_name.lower()).strip("-")[:MAX_NAME].strip("-")
    if not name:
        raise Invalid("NameRequired", f"the OVF's name {ovf_name!r} makes no VM name: give one (name)")
    return name


def nic_networks(count: int, networks: Sequence[str]) -> tuple[str, ...]:
    """The network of each of the OVF's ``count`` NICs: one network for all, or one each."""
    if count == 0 and networks:
        raise Invalid("NetworkMismatch", "the OVF has no NIC: leave the networks out")
    if count and not networks:
        raise Invalid("NetworkRequired", f"the OVF has {count} NICs: name the network they go on")
    if len(networks) == 1:
        return tuple(networks) * count
    if len(networks) != count:
        raise Invalid(
            "NetworkMismatch",
            f"the OVF has {count} NICs and {len(networks)} networks were named: name one for all, or one each",
        )
    return tuple(networks)
