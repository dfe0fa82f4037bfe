"""Storage pools and volumes: made to exist on the hosts that see them.

A volume's file is named after the Volume's uid (``domain.images.owned_volume_file``):
virtplane creates it, finds it again after a crash between the create and the status
write, and deletes only it; a file of another name in the pool is never touched.
"""

from __future__ import annotations

import logging

from virtplane.controllers.attachments import sync_attachment, volumes_of_vm
from virtplane.controllers.backup_copies import saved_backup_disk
from virtplane.controllers.backup_targets import target_ref
from virtplane.controllers.context import ControllerContext, Removal
from virtplane.controllers.host import reachability_changed
from virtplane.controllers.registration import Registration
from virtplane.controllers.scheduling import pool_hosts
from virtplane.controllers.watch import Watch, itself, name_of
from virtplane.domain.images import owned_volume_file
from virtplane.domain.pools import pool_driver_name, pool_path
from virtplane.domain.resources import (
    Host,
    HostConnection,
    Image,
    ImageKind,
    ImagePhase,
    PoolContent,
    PoolKind,
    Resource,
    SnapshotPhase,
    StoragePool,
    VirtualMachine,
    VirtualMachineSnapshot,
    VMPhase,
    Volume,
    VolumePhase,
)
from virtplane.domain.resources.volume import VOLUME_FINALIZER
from virtplane.drivers.base import HypervisorDriver, ImageRef, PoolRef
from virtplane.drivers.errors import DriverError, HostUnreachable, PermanentError
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache

log = logging.getLogger("virtplane.controllers.storage")


def pool_ref(pool: StoragePool) -> PoolRef:
    return PoolRef(
        name=pool_driver_name(pool),
        path=pool_path(pool),
        shared=pool.spec.kind is PoolKind.SHARED,
        capacity_gib=pool.spec.capacity_gib,
    )


def volume_file(volume: Volume) -> str:
    """The file of ``volume`` in its pool: the one recorded when it was made, else the uid's."""
    return volume.status.file or owned_volume_file(volume.metadata.uid)


def image_ref(cache: Cache, name: str, kind: ImageKind) -> tuple[ImageRef | None, str]:
    """The library file the Image ``name`` names, if it is of ``kind`` and Ready; else why not."""
    image = cache.image(name)
    if image is None:
        return None, f"image {name} does not exist"
    if image.spec.kind is not kind:
        return None, f"image {name} is a {image.spec.kind.value} image, not a {kind.value} image"
    if image.status.phase is not ImagePhase.READY:
        why = f": {image.status.message}" if image.status.message else ""
        return None, f"image {name} is {image.status.phase.value}{why}"
    pool = cache.pool(image.spec.pool)
    if pool is None or pool.spec.content is not PoolContent.IMAGES:
        return None, f"image {name}: library pool {image.spec.pool} does not exist"
    return library_ref(image, pool), ""


def library_ref(image: Image, pool: StoragePool) -> ImageRef:
    """How drivers find and check ``image``'s file in its library ``pool``."""
    written = image.spec.upload.size_bytes if image.spec.upload is not None else None
    return ImageRef(pool_ref(pool), image.spec.file, image.spec.effective_format.value, written)


async def pool_driver(
    ctx: ControllerContext, pool: StoragePool, *, also: StoragePool | None = None
) -> HypervisorDriver | None:
    """A connected driver of some host that sees ``pool`` (and ``also``, when given), or None."""
    hosts = pool_hosts(ctx.cache, pool)
    if also is not None:
        hosts &= pool_hosts(ctx.cache, also)
    for host_name in sorted(hosts):
        host = ctx.cache.host(host_name)
        if host is None or host.status.connection is not HostConnection.UP:
            continue
        try:
            driver = await ctx.hosts.get(host.spec.uri)
            await driver.ensure_pool(pool_ref(pool))
            if also is not None:
                await driver.ensure_pool(pool_ref(also))
            return driver
        except HostUnreachable:
            continue
    return None


class StoragePoolReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        pool = ctx.read(StoragePool, req.name, to_change=True)
        if pool is None:
            return None
        reachable = []
        for host_name in sorted(pool_hosts(ctx.cache, pool)):
            host = ctx.cache.host(host_name)
            if host is None or host.status.connection is not HostConnection.UP:
                continue
            try:
                driver = await ctx.hosts.get(host.spec.uri)
                await driver.ensure_pool(pool_ref(pool))
                reachable.append(host_name)
            except DriverError as exc:
                log.info("pool %s not ready on %s: %s", pool.metadata.name, host_name, exc)
        used = ctx.cache.pool_used_gib(pool.metadata.name)
        status = pool.status.model_copy(deep=True)
        status.reachable_hosts = reachable
        status.capacity_gib = pool.spec.capacity_gib
        status.used_gib = used
        if status != pool.status:
            pool.status = status
            await ctx.write(pool)
        return Result(requeue_after=60.0 if reachable else 5.0)


class VolumeReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        volume = ctx.read(Volume, req.name, to_change=True)
        if volume is None:
            return None
        pool = ctx.read(StoragePool, volume.spec.pool)
        if volume.metadata.deletion_requested_at is not None:
            return await self._delete(volume, pool)
        if VOLUME_FINALIZER not in volume.metadata.finalizers:  # the API sets it; others may not
            volume.metadata.finalizers.append(VOLUME_FINALIZER)
            volume = await ctx.write(volume)
        volume = await sync_attachment(ctx, volume)
        if volume.status.phase is VolumePhase.READY and volume.status.size_gib >= volume.spec.size_gib:
            return None
        if pool is None:
            return await self._fail(
                volume, VolumePhase.PENDING, f"pool {volume.spec.pool} does not exist", 5.0
            )
        if pool.spec.content is PoolContent.IMAGES:
            return await self._fail(
                volume,
                VolumePhase.FAILED,
                f"pool {pool.metadata.name} is an image library, not for volumes",
                60.0,
            )
        source, image_pool, handle, saved = None, None, None, None
        if volume.spec.source and volume.spec.source.image and volume.status.phase is not VolumePhase.READY:
            source, problem = image_ref(ctx.cache, volume.spec.source.image, ImageKind.DISK)
            image = ctx.cache.image(volume.spec.source.image)
            image_pool = ctx.cache.pool(image.spec.pool) if image else None
            if source is None or image_pool is None:
                return await self._fail(volume, VolumePhase.PENDING, problem, 5.0)
        elif self._copying(volume) and volume.spec.source and volume.spec.source.snapshot:
            handle, problem = self._saved_disk(volume.spec.source.snapshot, volume.spec.source.volume or "")
            if handle is None:
                return await self._fail(volume, VolumePhase.PENDING, problem, 5.0)
        elif self._copying(volume) and volume.spec.source and volume.spec.source.backup:
            saved = saved_backup_disk(ctx, volume.spec.source.backup, volume.spec.source.volume or "")
            if isinstance(saved, str):
                return await self._fail(volume, VolumePhase.PENDING, saved, 5.0)
        elif self._copying(volume) and volume.spec.source and volume.spec.source.volume:
            source, image_pool, problem = self._copied_volume(volume.spec.source.volume)
            if source is None:
                return await self._fail(volume, VolumePhase.PENDING, problem, 5.0)
        driver = await pool_driver(ctx, pool, also=image_pool)
        if driver is None:
            where = f" and pool {image_pool.metadata.name}" if image_pool else ""
            return await self._fail(
                volume, VolumePhase.PENDING, f"no connected host sees pool {pool.metadata.name}{where}", 5.0
            )
        file = volume_file(volume)
        try:
            if volume.status.phase is VolumePhase.READY:
                info = await driver.resize_volume(pool_ref(pool), file, volume.spec.size_gib)
            elif isinstance(saved, tuple):
                target, saved_volume = saved
                info = await driver.restore_from_backup(
                    target_ref(target), saved_volume, pool_ref(pool), file
                )
            elif handle is not None:
                linked = bool(volume.spec.source and volume.spec.source.linked)
                info = await driver.copy_volume_snapshot(
                    pool_ref(pool), file, volume.spec.size_gib, handle, linked=linked
                )
            else:
                linked = bool(volume.spec.source and volume.spec.source.linked)
                info = await driver.create_volume(
                    pool_ref(pool), file, volume.spec.size_gib, source, linked=linked
                )
        except PermanentError as exc:
            return await self._fail(volume, VolumePhase.FAILED, str(exc), 60.0)
        except DriverError as exc:
            return await self._fail(volume, VolumePhase.PENDING, str(exc), 5.0)
        volume.status.phase = VolumePhase.READY
        volume.status.path = info.path
        volume.status.file = file
        volume.status.size_gib = info.size_gib
        volume.status.message = ""
        ctx.event(volume, "Ready", f"created at {info.path}")
        await ctx.write(volume)
        return None

    @staticmethod
    def _copying(volume: Volume) -> bool:
        return volume.status.phase is not VolumePhase.READY

    def _saved_disk(self, snapshot_name: str, volume: str) -> tuple[str | None, str]:
        """The handle of the disk of ``volume`` that the snapshot saved, or why there is none."""
        snapshot = self.ctx.read(VirtualMachineSnapshot, snapshot_name)
        if snapshot is None:
            return None, f"snapshot {snapshot_name} to copy does not exist"
        if snapshot.status.phase is not SnapshotPhase.READY:
            return None, f"snapshot {snapshot_name} to copy is {snapshot.status.phase.value}"
        saved = next((d for d in snapshot.status.disk_snapshots if d.volume == volume), None)
        if saved is None:
            return None, f"snapshot {snapshot_name} saved no disk of volume {volume}"
        return saved.handle, ""

    def _copied_volume(self, name: str) -> tuple[ImageRef | None, StoragePool | None, str]:
        """The file of the Volume ``name`` to copy (a clone's source) and its pool, if it can be
        copied now: Ready, and no disk of a VM that is not Stopped (its content would change
        under the copy). Else why not."""
        source = self.ctx.cache.volume(name)
        if source is None:
            return None, None, f"volume {name} to copy does not exist"
        if source.status.phase is not VolumePhase.READY:
            return None, None, f"volume {name} to copy is {source.status.phase.value}"
        user = self.ctx.cache.vm(source.status.attached_vm) if source.status.attached_vm else None
        if user is not None and user.status.phase is not VMPhase.STOPPED:
            return (
                None,
                None,
                f"volume {name} to copy is a disk of VM {user.metadata.name}, which is {user.status.phase.value}",
            )
        pool = self.ctx.cache.pool(source.spec.pool)
        if pool is None:
            return None, None, f"pool {source.spec.pool} of volume {name} does not exist"
        # a VM's volumes are qcow2 files that stand alone: checked as an image is, then copied whole
        return ImageRef(pool_ref(pool), volume_file(source), "qcow2"), pool, ""

    async def _delete(self, volume: Volume, pool: StoragePool | None) -> Result | None:
        ctx = self.ctx
        if pool is not None and pool.spec.content is PoolContent.VOLUMES:
            # Also without a recorded path: a crash may have come between the create and the
            # status write, and the file's name (the uid's) says it is ours.
            driver = await pool_driver(ctx, pool)
            if driver is not None:
                await driver.delete_volume(pool_ref(pool), volume_file(volume))
            elif volume.status.path:
                return Result(requeue_after=5.0)
        if VOLUME_FINALIZER in volume.metadata.finalizers:
            volume.metadata.finalizers.remove(VOLUME_FINALIZER)
            volume = await ctx.write(volume)
        if not volume.metadata.finalizers:
            await ctx.write(Removal(Volume, volume.metadata.name))
        return None

    async def _fail(self, volume: Volume, phase: VolumePhase, message: str, retry: float) -> Result:
        if volume.status.phase != phase or volume.status.message != message:
            volume.status.phase = phase
            volume.status.message = message
            self.ctx.event(volume, "NotReady", message, warning=True)
            await self.ctx.write(volume)
        return Result(requeue_after=retry)


# --------------------------------------------------------------------------- watches


def _every_pool(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A host that came, went away or came back changes which hosts reach each pool."""
    if not reachability_changed(old, new):
        return []
    return [Request(StoragePool.KIND, pool.metadata.name) for pool in cache.pools()]


def _volumes_in_pool(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    return [Request(Volume.KIND, name) for name in cache.volumes_in_pool(name_of(old, new))]


def _volumes_copying(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """Clones still to be copied from the volume (it may be Ready now)."""
    return [Request(Volume.KIND, name) for name in cache.copies_of_volume(name_of(old, new))]


def _volumes_from_snapshot(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """Copies still to be made from the snapshot (it may be Ready now)."""
    return [Request(Volume.KIND, name) for name in cache.copies_of_snapshot(name_of(old, new))]


def _volumes_from_image(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """Volumes still to be copied from the image (it may be Ready now)."""
    image = name_of(old, new)
    return [
        Request(Volume.KIND, v.metadata.name)
        for v in cache.volumes()
        if v.spec.source and v.spec.source.image == image
    ]


POOL_WATCHES = (itself(StoragePool.KIND), Watch(Host.KIND, _every_pool))
VOLUME_WATCHES = (
    itself(Volume.KIND),
    Watch(Volume.KIND, _volumes_copying),
    Watch(VirtualMachineSnapshot.KIND, _volumes_from_snapshot),
    Watch(StoragePool.KIND, _volumes_in_pool),
    Watch(Image.KIND, _volumes_from_image),
    Watch(VirtualMachine.KIND, volumes_of_vm),
)

POOL_CONTROLLER = Registration(
    StoragePool.KIND, lambda parts: StoragePoolReconciler(parts.ctx), POOL_WATCHES, workers=2
)
VOLUME_CONTROLLER = Registration(
    Volume.KIND, lambda parts: VolumeReconciler(parts.ctx), VOLUME_WATCHES, workers=4
)
