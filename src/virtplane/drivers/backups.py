"""Backups of running domains, as the hypervisor makes them (issue 36): push-mode backup jobs
with checkpoints (QEMU dirty bitmaps), full then incremental.

A backup's files are volumes of the BackupTarget's pool (a directory every host defines as a
pool), so no caller names a path on a host. An incremental's volume is a qcow2 overlay whose
backing file is the previous backup's volume of the same disk: the newest file of a chain reads
as the whole disk at that point. A checkpoint is made by the job that starts the backup, in the
same call, so "the checkpoint exists" means "this backup began" (``begin_backup`` is idempotent
on it). Checkpoint metadata is the domain's on its host: a live migration carries the bitmaps
inside shared qcow2 files but not the metadata, so the caller reads the definitions before and
redefines them on the target after (libvirt 9.0, measured on the rig).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from virtplane.domain.resources import Capability
from virtplane.drivers.errors import Unsupported

if TYPE_CHECKING:
    from virtplane.drivers.base import PoolRef, VolumeInfo


@dataclass(frozen=True)
class DiskBackup:
    disk_path: str  # the domain's disk, as the host sees it (its volume's path)
    volume: str  # the backup's volume of this disk in the target pool
    size_bytes: int  # the disk's virtual size
    base_volume: str | None = None  # an incremental's: the previous backup's volume it overlays


@dataclass(frozen=True)
class BackupRequest:
    domain: str
    target: PoolRef
    checkpoint: str  # made by this backup: the next incremental builds on it
    disks: tuple[DiskBackup, ...]
    incremental_from: str | None = None  # the previous backup's checkpoint; None for a full one


class BackupJobState(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"  # no backup job known here (the daemon restarted, or none began)


@dataclass(frozen=True)
class BackupJob:
    state: BackupJobState
    total_bytes: int = 0
    processed_bytes: int = 0
    error: str = ""


@dataclass(frozen=True)
class BackupCheck:
    ok: bool
    message: str


class BackupOperations(Protocol):
    """The backup part of ``HypervisorDriver`` (hosts with ``Capability.BACKUP``)."""

    async def begin_backup(self, request: BackupRequest) -> None:
        """Create the target volumes and start the job, making ``request.checkpoint``; returns
        at once (progress from ``backup_job``). Nothing happens if the checkpoint exists already:
        this backup began before (a retry after a crash)."""

    async def backup_job(self, name: str) -> BackupJob:
        """The running backup job of domain ``name``, or the last one that ended here."""

    async def abort_backup(self, name: str) -> None:
        """Abort the running backup job of ``name`` (none running: nothing to do)."""

    async def checkpoints(self, name: str) -> tuple[str, ...]:
        """The domain's checkpoints here, oldest first."""

    async def delete_checkpoint(self, name: str, checkpoint: str) -> None:
        """Drop a checkpoint (its changes merge into its parent's); a missing one is no error."""

    async def checkpoint_definitions(self, name: str) -> tuple[str, ...]:
        """The checkpoints' definitions, oldest first, for ``redefine_checkpoints`` elsewhere."""

    async def redefine_checkpoints(self, name: str, definitions: tuple[str, ...]) -> None:
        """Define checkpoints read on another host (after a live migration), oldest first;
        those defined already are left as they are."""

    async def verify_backup(self, target: PoolRef, chains: tuple[tuple[str, ...], ...]) -> BackupCheck:
        """Check a backup's files in the target's pool: each disk's chain of volumes, the
        backup's own first and its bases after it. Every file's image is sound, each links to
        the next, and the disk read through the top reads as a flattened copy of it."""

    async def restore_from_backup(
        self, target: PoolRef, backup_volume: str, pool: PoolRef, name: str
    ) -> VolumeInfo:
        """Volume ``name`` of ``pool`` made anew with the disk ``backup_volume`` (in the target's
        pool) reads as, through its chain down to the full backup; made if missing. Refused while
        a running domain uses the volume. Safe to retry: the backup's files are only read."""


class NoBackups:
    """``BackupOperations`` of a driver without ``Capability.BACKUP``: each call is refused."""

    def _no_backups(self) -> Unsupported:
        return Unsupported(f"this host does not support {Capability.BACKUP.value}")

    async def begin_backup(self, request: BackupRequest) -> None:
        raise self._no_backups()

    async def backup_job(self, name: str) -> BackupJob:
        raise self._no_backups()

    async def abort_backup(self, name: str) -> None:
        raise self._no_backups()

    async def checkpoints(self, name: str) -> tuple[str, ...]:
        raise self._no_backups()

    async def delete_checkpoint(self, name: str, checkpoint: str) -> None:
        raise self._no_backups()

    async def checkpoint_definitions(self, name: str) -> tuple[str, ...]:
        raise self._no_backups()

    async def redefine_checkpoints(self, name: str, definitions: tuple[str, ...]) -> None:
        raise self._no_backups()

    async def verify_backup(self, target: PoolRef, chains: tuple[tuple[str, ...], ...]) -> BackupCheck:
        raise self._no_backups()

    async def restore_from_backup(
        self, target: PoolRef, backup_volume: str, pool: PoolRef, name: str
    ) -> VolumeInfo:
        raise self._no_backups()
