"""The backup calls of ``SimDriver`` (``BackupOperations``; the model is ``_backups``)."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from virtplane.drivers.backups import BackupCheck, BackupJob, BackupRequest
from virtplane.drivers.base import PoolRef, VolumeInfo

from ._world import SimWorld, entry_point

if TYPE_CHECKING:
    from virtplane.drivers.base import PoolRef

    from ._host import SimHost


class SimBackupCalls:
    @property
    @abstractmethod
    def world(self) -> SimWorld: ...

    @abstractmethod
    def _host(self) -> SimHost: ...

    @entry_point
    async def begin_backup(self, request: BackupRequest) -> None:
        host = self._host()
        self.world.backups.begin(host.name, host.get(request.domain), request)

    @entry_point
    async def backup_job(self, name: str) -> BackupJob:
        return self.world.backups.job(self._host().get(name))

    @entry_point
    async def abort_backup(self, name: str) -> None:
        self.world.backups.abort(self._host().get(name))

    @entry_point
    async def checkpoints(self, name: str) -> tuple[str, ...]:
        return tuple(c.name for c in self._host().get(name).checkpoints)

    @entry_point
    async def delete_checkpoint(self, name: str, checkpoint: str) -> None:
        self.world.backups.delete_checkpoint(self._host().get(name), checkpoint)

    @entry_point
    async def checkpoint_definitions(self, name: str) -> tuple[str, ...]:
        return tuple(c.definition() for c in self._host().get(name).checkpoints)

    @entry_point
    async def redefine_checkpoints(self, name: str, definitions: tuple[str, ...]) -> None:
        self.world.backups.redefine(self._host().get(name), definitions)

    @entry_point
    async def verify_backup(self, target: PoolRef, chains: tuple[tuple[str, ...], ...]) -> BackupCheck:
        return self.world.backups.verify(self._host().name, target, chains)

    async def restore_from_backup(
        self, target: PoolRef, backup_volume: str, pool: PoolRef, name: str
    ) -> VolumeInfo:
        host = self._host().name
        self.world.storage.ensure_pool(host, target)
        return self.world.storage.restore_volume(host, target, backup_volume, pool, name)


__all__ = ["SimBackupCalls"]
