"""Storage pools and volumes: made to exist on the hosts that see them."""

from __future__ import annotations

import logging

from virtplane.controllers.attachments import sync_attachment
from virtplane.controllers.context import ControllerContext
from virtplane.controllers.scheduling import pool_driver_name, pool_hosts
from virtplane.domain.resources import HostConnection, PoolKind, StoragePool, Volume, VolumePhase
from virtplane.drivers.base import HypervisorDriver, PoolRef
from virtplane.drivers.errors import DriverError, HostUnreachable, PermanentError
from virtplane.reconcile.types import Request, Result

log = logging.getLogger("virtplane.controllers.storage")

FINALIZER = "virtplane.io/volume"
DEFAULT_POOL_ROOT = "/var/lib/virtplane/pools"


def pool_ref(pool: StoragePool) -> PoolRef:
    name = pool_driver_name(pool)
    return PoolRef(
        name=name,
        path=pool.spec.path or f"{DEFAULT_POOL_ROOT}/{name}",
        shared=pool.spec.kind is PoolKind.SHARED,
        capacity_gib=pool.spec.capacity_gib,
    )


async def pool_driver(ctx: ControllerContext, pool: StoragePool) -> HypervisorDriver | None:
    """A connected driver of some host that sees ``pool``, or None."""
    for host_name in sorted(pool_hosts(ctx.cache, pool)):
        host = ctx.cache.host(host_name)
        if host is None or host.status.connection is not HostConnection.UP:
            continue
        try:
            driver = await ctx.hosts.get(host.spec.uri)
            await driver.ensure_pool(pool_ref(pool))
            return driver
        except HostUnreachable:
            continue
    return None


class StoragePoolReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        pool = ctx.store.find(StoragePool, req.name)
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
        used = sum(v.spec.size_gib for v in ctx.cache.volumes() if v.spec.pool == pool.metadata.name)
        status = pool.status.model_copy(deep=True)
        status.reachable_hosts = reachable
        status.capacity_gib = pool.spec.capacity_gib
        status.used_gib = used
        if status != pool.status:
            pool.status = status
            ctx.write(pool)
        return Result(requeue_after=60.0 if reachable else 5.0)


class VolumeReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        volume = ctx.store.find(Volume, req.name)
        if volume is None:
            return None
        pool = ctx.cache.pool(volume.spec.pool) or ctx.store.find(StoragePool, volume.spec.pool)
        if volume.metadata.deletion_requested_at is not None:
            if pool is not None and volume.status.path:
                driver = await pool_driver(ctx, pool)
                if driver is None:
                    return Result(requeue_after=5.0)
                await driver.delete_volume(pool_ref(pool), volume.metadata.name)
            if FINALIZER in volume.metadata.finalizers:
                volume.metadata.finalizers.remove(FINALIZER)
                volume = ctx.write(volume)
            if not volume.metadata.finalizers:
                ctx.store.delete(Volume, volume.metadata.name)
            return None
        if FINALIZER not in volume.metadata.finalizers:
            volume.metadata.finalizers.append(FINALIZER)
            volume = ctx.write(volume)
        volume = sync_attachment(ctx, volume)
        if volume.status.phase is VolumePhase.READY and volume.status.size_gib >= volume.spec.size_gib:
            return None
        if pool is None:
            return self._fail(volume, VolumePhase.PENDING, f"pool {volume.spec.pool} does not exist", 5.0)
        driver = await pool_driver(ctx, pool)
        if driver is None:
            return self._fail(
                volume, VolumePhase.PENDING, f"no connected host sees pool {pool.metadata.name}", 5.0
            )
        source = volume.spec.source.image if volume.spec.source else None
        try:
            if volume.status.phase is VolumePhase.READY:
                info = await driver.resize_volume(pool_ref(pool), volume.metadata.name, volume.spec.size_gib)
            else:
                info = await driver.create_volume(
                    pool_ref(pool), volume.metadata.name, volume.spec.size_gib, source
                )
        except PermanentError as exc:
            return self._fail(volume, VolumePhase.FAILED, str(exc), 60.0)
        except DriverError as exc:
            return self._fail(volume, VolumePhase.PENDING, str(exc), 5.0)
        volume.status.phase = VolumePhase.READY
        volume.status.path = info.path
        volume.status.size_gib = info.size_gib
        volume.status.message = ""
        ctx.write(volume)
        ctx.event(volume, "Ready", f"created at {info.path}")
        return None

    def _fail(self, volume: Volume, phase: VolumePhase, message: str, retry: float) -> Result:
        if volume.status.phase != phase or volume.status.message != message:
            volume.status.phase = phase
            volume.status.message = message
            self.ctx.write(volume)
            self.ctx.event(volume, "NotReady", message, warning=True)
        return Result(requeue_after=retry)
