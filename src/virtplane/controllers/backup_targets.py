"""The backup target controller (issue 36): the target's directory is a shared pool on every
host of its cluster; its status says which hosts reached it, what the backups there take and
what is left of the capacity the admin gave it."""

from __future__ import annotations

import logging

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.registration import Registration
from virtplane.controllers.watch import Watch, itself
from virtplane.domain.resources import (
    BackupTarget,
    Host,
    HostConnection,
    Resource,
    VirtualMachineBackup,
    target_pool_name,
)
from virtplane.drivers.base import HypervisorDriver, PoolRef
from virtplane.drivers.errors import DriverError, HostUnreachable
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache

log = logging.getLogger("virtplane.controllers.backup_targets")

GIB = 1024**3


def target_ref(target: BackupTarget) -> PoolRef:
    return PoolRef(
        name=target_pool_name(target),
        path=target.spec.path,
        shared=True,
        capacity_gib=target.spec.capacity_gib,
    )


def cluster_hosts(cache: Cache, target: BackupTarget) -> list[Host]:
    return sorted(
        (h for h in cache.hosts() if h.spec.cluster == target.spec.cluster), key=lambda h: h.metadata.name
    )


async def target_driver(
    ctx: ControllerContext, target: BackupTarget, prefer: str | None = None
) -> HypervisorDriver | None:
    """A connected driver of a host of the target's cluster (``prefer`` first) that has the
    target's pool, or None."""
    hosts = cluster_hosts(ctx.cache, target)
    hosts.sort(key=lambda h: h.metadata.name != prefer)
    for host in hosts:
        if host.status.connection is not HostConnection.UP:
            continue
        try:
            driver = await ctx.hosts.get(host.spec.uri)
            await driver.ensure_pool(target_ref(target))
            return driver
        except HostUnreachable:
            continue
    return None


def used_gib(cache: Cache, target: str) -> int:
    """What the target's backups take: each backup volume counted at its disk's size."""
    return sum(
        -(-disk.size_bytes // GIB)
        for backup in cache.backups()
        if backup.spec.target == target
        for disk in backup.status.disks
    )


class BackupTargetReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        target = ctx.read(BackupTarget, req.name, to_change=True)
        if target is None:
            return None
        status = target.status.model_copy(deep=True)
        status.reachable_hosts, status.unreachable_hosts = [], {}
        hosts = cluster_hosts(ctx.cache, target)
        for host in hosts:
            name = host.metadata.name
            if host.status.connection is not HostConnection.UP:
                status.unreachable_hosts[name] = f"the host is {host.status.connection.value}"
                continue
            try:
                driver = await ctx.hosts.get(host.spec.uri)
                await driver.ensure_pool(target_ref(target))
                status.reachable_hosts.append(name)
            except DriverError as exc:
                log.info("backup target %s not reached from %s: %s", target.metadata.name, name, exc)
                status.unreachable_hosts[name] = str(exc)
        status.capacity_gib = target.spec.capacity_gib
        status.used_gib = used_gib(ctx.cache, target.metadata.name)
        status.free_gib = max(0, status.capacity_gib - status.used_gib)
        status.healthy = bool(hosts) and not status.unreachable_hosts
        if not hosts:
            status.message = f"no host is in cluster {target.spec.cluster}"
        elif status.unreachable_hosts:
            status.message = f"{len(status.unreachable_hosts)} of {len(hosts)} host(s) cannot reach it"
        else:
            status.message = f"reached from {len(hosts)} host(s)"
        if status != target.status:
            target.status = status
            await ctx.write(target)
        return Result(requeue_after=60.0 if status.healthy else 10.0)


def _targets_of_host(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A host that joins or leaves a cluster, or connects or disconnects: not each status write."""
    if (
        isinstance(old, Host)
        and isinstance(new, Host)
        and (old.spec.cluster, old.status.connection) == (new.spec.cluster, new.status.connection)
    ):
        return []
    clusters = {h.spec.cluster for h in (old, new) if isinstance(h, Host)}
    return [
        Request(BackupTarget.KIND, t.metadata.name)
        for t in cache.objects(BackupTarget)
        if t.spec.cluster in clusters
    ]


def _target_of_backup(_: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A backup that comes, goes or plans its volumes (what the target's used space counts), not
    each write of its progress."""
    if (
        isinstance(old, VirtualMachineBackup)
        and isinstance(new, VirtualMachineBackup)
        and old.status.disks == new.status.disks
    ):
        return []
    backup = new or old
    return (
        [Request(BackupTarget.KIND, backup.spec.target)] if isinstance(backup, VirtualMachineBackup) else []
    )


CONTROLLER = Registration(
    BackupTarget.KIND,
    lambda parts: BackupTargetReconciler(parts.ctx),
    (
        itself(BackupTarget.KIND),
        Watch(Host.KIND, _targets_of_host, batch_s=1.0),
        Watch(VirtualMachineBackup.KIND, _target_of_backup, batch_s=1.0),
    ),
)
