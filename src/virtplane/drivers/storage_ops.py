"""The driver's storage operations: directory pools, qcow2 volumes, library images, and the
snapshots the control plane owns (not libvirt snapshot metadata, so domains stay migratable)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from virtplane.drivers.base import DomainSpec


@dataclass(frozen=True)
class PoolRef:
    name: str
    path: str  # directory on the host (dir pools), or the sim's pool name
    shared: bool = False
    capacity_gib: int = 0


@dataclass(frozen=True)
class ImageRef:
    """A file in an image library pool, by name: the driver resolves and checks it before each use."""

    pool: PoolRef
    file: str
    format: str = "raw"  # what the file must be: qcow2, raw (kernels and initrds) or iso
    written_bytes: int | None = (
        None  # virtplane wrote it (an upload): checked by its size, through the driver
    )


@dataclass(frozen=True)
class ImageInfo:
    size_bytes: int
    virtual_size_bytes: int
    format: str


@dataclass(frozen=True)
class VolumeInfo:
    name: str
    path: str
    size_gib: int


class StorageOperations(Protocol):
    """Part of ``HypervisorDriver``: pools, volumes, images and volume snapshots on one host."""

    async def ensure_pool(self, pool: PoolRef) -> None: ...

    async def inspect_image(self, image: ImageRef) -> ImageInfo:
        """Check a library file: a regular file of the expected format inside its pool (no link
        leading out of it, no device, no backing file). ``ImageRefused`` or ``NotFound`` otherwise,
        with messages that name nothing outside the library."""

    async def create_volume(
        self, pool: PoolRef, name: str, size_gib: int, source: ImageRef | None = None, *, linked: bool = False
    ) -> VolumeInfo:
        """A new volume, or the one of that name from an earlier, interrupted call; ``source`` is
        checked again (as ``inspect_image``) right before it is copied. ``linked``: not a copy
        but a qcow2 overlay whose backing file is ``source`` (a volume of the same pool)."""

    async def upload_volume(self, pool: PoolRef, name: str, data: bytes) -> VolumeInfo:
        """A raw volume holding ``data`` (a small file such as a NoCloud seed), sent through the
        driver so remote hosts get it; written whole each time, so only while no running domain
        uses it."""

    async def write_image(self, image: ImageRef, source: str) -> None:
        """Write the control plane's file at ``source`` into the library as ``image.file``, over
        the driver's connection (libvirt's volume upload), so a host whose library the control
        plane does not see gets it too. Replaces an earlier copy (one cut off by a crash); a
        write that fails leaves no file behind."""

    async def delete_volume(self, pool: PoolRef, name: str) -> None: ...

    async def resize_volume(self, pool: PoolRef, name: str, size_gib: int) -> VolumeInfo: ...

    async def snapshot_volume(self, pool: PoolRef, name: str, snapshot_id: str) -> str:
        """Save the volume's current content; returns a handle for revert/delete."""

    async def revert_volume(self, pool: PoolRef, name: str, handle: str) -> None: ...

    async def copy_volume_snapshot(
        self, pool: PoolRef, name: str, size_gib: int, handle: str, *, linked: bool = False
    ) -> VolumeInfo:
        """A new volume in ``pool`` holding what ``handle`` saved (a clone of a snapshot's disk), at
        least as large; or the one of that name from an earlier, interrupted call. ``linked``: a
        qcow2 overlay whose backing file is the saved disk, not a copy."""

    async def delete_volume_snapshot(self, handle: str) -> None: ...

    async def save_memory(self, name: str, snapshot_id: str) -> str:
        """Save a running domain's memory state (the domain keeps running); returns a handle."""

    async def restore_memory(self, spec: DomainSpec, handle: str) -> None:
        """Start the domain from saved memory (after its disks were reverted), running even if it
        was saved paused; raises when the image cannot be used here (missing, other CPU)."""
