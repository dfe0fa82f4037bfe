"""The snapshot operations of the libvirt driver: disk snapshots and memory images."""

from __future__ import annotations

from typing import Any

from virtplane.drivers.base import Capability, DomainSpec, PoolRef, VolumeInfo
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.libvirt import storage
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.lifecycle import DomainLifecycle


class SnapshotOperations(DomainLifecycle):
    """A memory restore defines the domain first, so this part builds on the domain operations."""

    async def snapshot_volume(self, pool: PoolRef, name: str, snapshot_id: str) -> str:
        live_backup = self.flavor.live_backup
        return await self._call(
            lambda conn: storage.snapshot_volume(conn, pool, name, snapshot_id, live_backup=live_backup)
        )

    async def copy_volume_snapshot(
        self, pool: PoolRef, name: str, size_gib: int, handle: str, *, linked: bool = False
    ) -> VolumeInfo:
        can_resize = Capability.VOLUME_RESIZE in self.capabilities
        return await self._call(
            lambda conn: storage.copy_snapshot(
                conn, pool, name, size_gib, handle, can_resize=can_resize, linked=linked
            )
        )

    async def revert_volume(self, pool: PoolRef, name: str, handle: str) -> None:
        await self._call(lambda conn: storage.revert_volume(conn, pool, name, handle))

    async def delete_volume_snapshot(self, handle: str) -> None:
        def delete(conn: Any) -> None:
            if not self._memory.delete_local(handle):  # a memory image of the test driver's
                storage.delete_snapshot(conn, handle)

        await self._call(delete)

    async def save_memory(self, name: str, snapshot_id: str) -> str:
        storage.check_name("snapshot id", snapshot_id)
        return await self._call(
            lambda conn: self._memory.save(conn, LibvirtDomain.lookup(conn, name), snapshot_id)
        )

    async def restore_memory(self, spec: DomainSpec, handle: str) -> None:
        await self.ensure_defined(spec)

        def restore(conn: Any) -> None:
            definition = self._domain_xml(conn, spec) if self.flavor.restore_with_definition else None
            dom = LibvirtDomain.lookup(conn, spec.name)
            if dom.is_active():
                raise PermanentError(f"domain {spec.name} is running; stop it before restoring memory")
            self._stops.clear(dom)
            self._memory.restore(conn, handle, definition)

        await self._call(restore)
