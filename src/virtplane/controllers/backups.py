"""The backup controller (issue 36): one step a look, each step's intent durable before the
step that acts on it.

1. Plan (Pending): full or incremental and why (``domain.backups.next_mode``), the base, the
   checkpoint named from the backup's uid, the host, the volumes; written (``backup.planned``)
   before any call that changes a host.
2. Begin (Running, live VM): the guest's filesystems frozen through its agent where one is
   connected, the hypervisor's job begun (idempotent on its checkpoint: a retry after a crash
   starts nothing new), thawed at once (the job copies the disks as they were when it began),
   recorded (``backup.begun``). A stopped VM's volumes are copied into the target's pool instead,
   one durable disk at a time, with no checkpoint.
3. Follow: the job's progress in status, until it ends.
4. Finish: Succeeded, and the VM's older backup checkpoints dropped (one dirty bitmap kept).

A job the host no longer knows (its daemon restarted, the domain stopped) or that failed makes
the backup Failed with the reason, stored first (``backup.failed``); then its checkpoint and
volumes go: a failed backup is never a base, and nothing of it is left for ever.

A live migration does not carry checkpoint metadata (libvirt 9.0): the next backup redefines
the checkpoint on the VM's new host from what its base kept (``backup_checkpoints``) and is
incremental, or full where that fails, and says which.
"""

from __future__ import annotations

import logging

from virtplane.controllers.backup_checkpoints import checkpoint_on_host
from virtplane.controllers.backup_quiesce import freeze, thaw
from virtplane.controllers.backup_targets import target_driver, target_ref
from virtplane.controllers.backup_verify import KIND as VERIFY_KIND
from virtplane.controllers.backup_verify import verify_asked
from virtplane.controllers.context import ControllerContext, Removal
from virtplane.controllers.registration import Registration
from virtplane.controllers.storage import pool_driver, pool_ref, volume_file
from virtplane.controllers.watch import itself
from virtplane.domain.backups import BackupMode, ChainState, next_mode
from virtplane.domain.intents import strip_system
from virtplane.domain.phases import LIVE_PHASES
from virtplane.domain.resources import (
    BackupDisk,
    BackupPhase,
    BackupTarget,
    CapturedVM,
    SnapshotConsistency,
    StoragePool,
    VirtualMachine,
    VirtualMachineBackup,
    Volume,
)
from virtplane.drivers.backups import BackupJobState, BackupRequest, DiskBackup
from virtplane.drivers.base import HypervisorDriver, ImageRef, domain_name
from virtplane.drivers.errors import DriverError, NotFound, PermanentError
from virtplane.reconcile.types import Request, Result

log = logging.getLogger("virtplane.controllers.backups")

FINALIZER = "virtplane.io/backup-data"
CHECKPOINT_PREFIX = "backup-"
MAX_CHAIN = 14
"""Incrementals on one full backup before the next full one: a restore reads the whole chain."""
GIB = 1024**3
FOLLOW_S = 1.0


def checkpoint_name(backup: VirtualMachineBackup) -> str:
    return f"{CHECKPOINT_PREFIX}{backup.metadata.uid}"


def backup_volume_name(backup: VirtualMachineBackup, volume: str) -> str:
    return f"backup-{backup.metadata.uid}-{volume}.qcow2"


def _finished(backup: VirtualMachineBackup) -> float:
    return backup.status.finished_at.timestamp() if backup.status.finished_at else 0.0


class BackupReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def _host_driver(self, host_name: str | None) -> HypervisorDriver | None:
        host = self.ctx.cache.host(host_name) if host_name else None
        return None if host is None else await self.ctx.hosts.get(host.spec.uri)

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        backup = ctx.read(VirtualMachineBackup, req.name, to_change=True)
        if backup is None:
            return None
        if backup.metadata.deletion_requested_at is not None:
            return await self._delete(backup)
        if backup.status.phase is BackupPhase.FAILED and backup.status.cleanup_pending:
            return await self._clean_up(backup)
        if backup.status.phase in (BackupPhase.SUCCEEDED, BackupPhase.FAILED):
            if verify_asked(backup):  # asked before a restart: the verifier has no look of its own on start
                ctx.enqueue(VERIFY_KIND, backup.metadata.name)
            return None
        if FINALIZER not in backup.metadata.finalizers:
            backup.metadata.finalizers.append(FINALIZER)
            backup = await ctx.write(backup)
        vm = ctx.read(VirtualMachine, backup.spec.vm)
        target = ctx.read(BackupTarget, backup.spec.target)
        if vm is None or target is None:
            missing = f"VM {backup.spec.vm}" if vm is None else f"backup target {backup.spec.target}"
            return await self._fail(backup, f"{missing} does not exist")
        try:
            if backup.status.phase is BackupPhase.PENDING:
                return await self._plan(backup, vm)
            if backup.status.checkpoint is None:
                return await self._copy(backup, vm, target)
            return await self._follow(backup, vm)
        except PermanentError as exc:
            return await self._fail(backup, str(exc))
        except DriverError as exc:
            log.info("backup %s: %s; retrying", backup.metadata.name, exc)
            said = f"retrying: {exc}"
            if backup.status.message != said:  # an error that persists is seen, not only logged
                backup.status.message = said
                await ctx.write(backup)
            return Result(requeue_after=2.0)

    # ------------------------------------------------------------------ plan

    def _good_backups(self, backup: VirtualMachineBackup) -> dict[str, VirtualMachineBackup]:
        return {
            b.metadata.name: b
            for b in self.ctx.cache.backups()
            if b.spec.vm == backup.spec.vm
            and b.spec.target == backup.spec.target
            and b.status.phase is BackupPhase.SUCCEEDED
            and b.metadata.deletion_requested_at is None
        }

    async def _chain(
        self, backup: VirtualMachineBackup, driver: HypervisorDriver, dname: str
    ) -> tuple[VirtualMachineBackup | None, ChainState, str]:
        goods = self._good_backups(backup)
        newest = max(goods.values(), key=_finished, default=None)
        if newest is None:
            return None, ChainState(None, None, False, 0), ""
        length, base = 0, newest
        while base.status.base is not None and base.status.base in goods:
            length, base = length + 1, goods[base.status.base]
        on_host, note = await checkpoint_on_host(driver, dname, newest, backup.status.host)
        return newest, ChainState(newest.metadata.name, newest.status.checkpoint, on_host, length), note

    async def _plan(self, backup: VirtualMachineBackup, vm: VirtualMachine) -> Result | None:
        ctx = self.ctx
        busy = [
            b.metadata.name
            for b in ctx.cache.backups()
            if b.spec.vm == backup.spec.vm
            and b.metadata.name != backup.metadata.name
            and b.status.phase is BackupPhase.RUNNING
        ]
        if busy:
            message = f"waiting for backup {busy[0]} of the same VM to end"
            if backup.status.message != message:
                backup.status.message = message
                await ctx.write(backup)
            return Result(requeue_after=5.0)
        if not vm.spec.disks:
            return await self._fail(backup, f"VM {vm.metadata.name} has no disks to back up")
        disks = []
        for disk in vm.spec.disks:
            volume = ctx.read(Volume, disk.volume)
            if volume is None:
                return await self._fail(backup, f"disk {disk.volume} has no volume")
            size = volume.spec.size_gib * GIB
            disks.append(
                BackupDisk(
                    volume=disk.volume, backup_volume=backup_volume_name(backup, disk.volume), size_bytes=size
                )
            )
        status = backup.status
        live = vm.status.phase in LIVE_PHASES and bool(vm.status.host)
        if live:
            driver = await self._host_driver(vm.status.host)
            if driver is None:
                return Result(requeue_after=2.0)
            backup.status.host = vm.status.host  # where the backup runs (not a VM's placement)
            base, chain, note = await self._chain(backup, driver, domain_name(vm.metadata.uid))
            mode, reason = next_mode(chain, MAX_CHAIN)
            reason += note
            if backup.spec.full:
                mode, reason = BackupMode.FULL, "full: asked for (spec.full)"
            if mode is BackupMode.INCREMENTAL and base is not None:
                based = {d.volume: d.backup_volume for d in base.status.disks}
                new = [d.volume for d in disks if d.volume not in based]
                if new:
                    mode, reason = BackupMode.FULL, f"full: disk {new[0]} is new since {base.metadata.name}"
                else:
                    status.base = base.metadata.name
                    for planned in disks:
                        planned.base_volume = based[planned.volume]
            status.checkpoint, status.host = checkpoint_name(backup), vm.status.host
        else:
            mode, reason = BackupMode.FULL, "full: the VM is stopped, its disks are copied whole"
        status.phase, status.mode, status.mode_reason, status.disks = BackupPhase.RUNNING, mode, reason, disks
        status.total_bytes = 0 if live else sum(d.size_bytes for d in disks)
        status.captured = CapturedVM(
            spec=vm.spec, labels=dict(vm.metadata.labels), annotations=strip_system(vm.metadata.annotations)
        )
        status.power_state = "Running" if live else "Stopped"
        status.started_at, status.message = ctx.now(), reason
        ctx.event(backup, "Planned", reason)
        await ctx.durable("backup.planned", backup)
        return Result(requeue_after=0.0)

    # ------------------------------------------------------------------ a running VM

    async def _follow(self, backup: VirtualMachineBackup, vm: VirtualMachine) -> Result | None:
        ctx = self.ctx
        driver = await self._host_driver(backup.status.host)
        if driver is None:
            return Result(requeue_after=2.0)
        dname = domain_name(vm.metadata.uid)
        if not backup.status.begun:
            if vm.status.host != backup.status.host or vm.status.phase not in LIVE_PHASES:
                return await self._fail(backup, "the VM stopped or moved before its backup began")
            return await self._begin(backup, vm, driver, dname)
        try:
            job = await driver.backup_job(dname)
        except NotFound:
            return await self._fail(backup, f"the VM's domain is gone from host {backup.status.host}")
        if job.state is BackupJobState.RUNNING:
            if (job.total_bytes, job.processed_bytes) != (
                backup.status.total_bytes,
                backup.status.processed_bytes,
            ):
                backup.status.total_bytes, backup.status.processed_bytes = (
                    job.total_bytes,
                    job.processed_bytes,
                )
                await ctx.write(backup)
            return Result(requeue_after=FOLLOW_S)
        if job.state is BackupJobState.SUCCEEDED:
            backup.status.total_bytes = job.total_bytes
            if len(backup.status.disks) == 1:  # the job counts bytes for all its disks together
                backup.status.disks[0].bytes = job.total_bytes
            return await self._succeed(backup, vm, driver, dname)
        if job.state is BackupJobState.FAILED:
            return await self._fail(backup, f"the backup job failed: {job.error}")
        return await self._fail(
            backup,
            f"host {backup.status.host} has no backup job for the VM: its hypervisor daemon restarted "
            "or the VM stopped during the backup",
        )

    async def _begin(
        self, backup: VirtualMachineBackup, vm: VirtualMachine, driver: HypervisorDriver, dname: str
    ) -> Result | None:
        checkpoint = backup.status.checkpoint or checkpoint_name(backup)
        request = BackupRequest(
            domain=dname,
            target=target_ref(self._target(backup)),
            checkpoint=checkpoint,
            disks=tuple(self._disk_request(d) for d in backup.status.disks),
            incremental_from=self._base_checkpoint(backup),
        )
        frozen = await freeze(backup, vm, driver, dname)
        try:
            await driver.begin_backup(request)
        finally:
            if frozen:  # the job copies the disks as they were when it began
                await thaw(self.ctx, vm, driver, dname)
        backup.status.begun = True
        backup.status.message = backup.status.mode_reason  # no longer "retrying: ..."
        self.ctx.event(backup, "Begun", f"{backup.status.mode_reason}; {backup.status.consistency_reason}")
        await self.ctx.durable("backup.begun", backup)
        return Result(requeue_after=FOLLOW_S)

    def _target(self, backup: VirtualMachineBackup) -> BackupTarget:
        target = self.ctx.read(BackupTarget, backup.spec.target)
        if target is None:
            raise PermanentError(f"backup target {backup.spec.target} does not exist")
        return target

    def _disk_request(self, disk: BackupDisk) -> DiskBackup:
        volume = self.ctx.read(Volume, disk.volume)
        pool = self.ctx.read(StoragePool, volume.spec.pool) if volume else None
        if volume is None or pool is None or not volume.status.path:
            raise PermanentError(f"disk {disk.volume} has no volume, pool or path")
        return DiskBackup(volume.status.path, disk.backup_volume, disk.size_bytes, disk.base_volume)

    def _base_checkpoint(self, backup: VirtualMachineBackup) -> str | None:
        if backup.status.base is None:
            return None
        base = self.ctx.read(VirtualMachineBackup, backup.status.base)
        if base is None or base.status.checkpoint is None:
            raise PermanentError(f"the base backup {backup.status.base} or its checkpoint is gone")
        return base.status.checkpoint

    # ------------------------------------------------------------------ a stopped VM

    async def _copy(
        self, backup: VirtualMachineBackup, vm: VirtualMachine, target: BackupTarget
    ) -> Result | None:
        ctx = self.ctx
        backup.status.consistency = SnapshotConsistency.POWERED_OFF
        backup.status.consistency_reason = "the VM was stopped"
        for disk in backup.status.disks:
            if disk.bytes:
                continue  # copied in an earlier look
            if vm.status.phase in LIVE_PHASES:
                return await self._fail(backup, "the VM started while its disks were copied")
            volume = ctx.read(Volume, disk.volume)
            pool = ctx.read(StoragePool, volume.spec.pool) if volume else None
            if volume is None or pool is None:
                return await self._fail(backup, f"disk {disk.volume} has no volume or pool")
            driver = await pool_driver(ctx, pool)
            if driver is None:
                return Result(requeue_after=2.0)
            await driver.ensure_pool(target_ref(target))
            source = ImageRef(pool_ref(pool), volume_file(volume), "qcow2")
            await driver.create_volume(
                target_ref(target), disk.backup_volume, -(-disk.size_bytes // GIB), source
            )
            disk.bytes = disk.size_bytes
            backup.status.processed_bytes += disk.size_bytes
            backup = await ctx.write(backup)  # each copy is recorded before the next
        return await self._succeed(backup, vm, None, "")

    # ------------------------------------------------------------------ endings

    async def _succeed(
        self, backup: VirtualMachineBackup, vm: VirtualMachine, driver: HypervisorDriver | None, dname: str
    ) -> Result | None:
        status = backup.status
        status.phase, status.finished_at = BackupPhase.SUCCEEDED, self.ctx.now()
        status.processed_bytes = status.total_bytes
        mode = status.mode.value if status.mode else "?"
        status.message = f"{mode}: {len(status.disks)} disk(s), {status.total_bytes} bytes written"
        if status.consistency is not None:
            status.message += f", {status.consistency.value}"
        self.ctx.event(backup, "Succeeded", status.message)
        self.ctx.event(vm, "BackupTaken", f"backup {backup.metadata.name}: {status.message}")
        backup = await self.ctx.write(backup)
        if driver is not None and status.checkpoint is not None:
            # one dirty bitmap per VM: each slows the guest's writes; a next backup that finds its
            # base's checkpoint gone is full
            for old in await driver.checkpoints(dname):
                if old.startswith(CHECKPOINT_PREFIX) and old != status.checkpoint:
                    await driver.delete_checkpoint(dname, old)
            backup.status.checkpoint_definitions = list(
                await driver.checkpoint_definitions(dname)
            )  # its own now
            await self.ctx.write(backup)
        return None

    async def _fail(self, backup: VirtualMachineBackup, message: str) -> Result | None:
        status = backup.status
        status.phase, status.message, status.finished_at = BackupPhase.FAILED, message, self.ctx.now()
        status.cleanup_pending = bool(status.checkpoint or status.disks)
        self.ctx.event(backup, "Failed", message, warning=True)
        backup = await self.ctx.durable("backup.failed", backup)
        return await self._clean_up(backup) if status.cleanup_pending else None

    async def _clean_up(self, backup: VirtualMachineBackup) -> Result | None:
        try:
            if not await self._remove_data(backup):
                return Result(requeue_after=5.0)
        except DriverError as exc:
            log.info("backup %s: cleaning up: %s; retrying", backup.metadata.name, exc)
            return Result(requeue_after=5.0)
        backup.status.cleanup_pending = False
        await self.ctx.write(backup)
        return None

    async def _remove_data(self, backup: VirtualMachineBackup) -> bool:
        """Abort its job, drop its checkpoint and volumes; False while a host to do it is missing."""
        ctx = self.ctx
        vm = ctx.read(VirtualMachine, backup.spec.vm)
        if backup.status.checkpoint is not None and vm is not None and vm.status.host == backup.status.host:
            driver = await self._host_driver(backup.status.host)
            dname = domain_name(vm.metadata.uid)
            if driver is not None:
                try:
                    await driver.abort_backup(dname)
                    await driver.delete_checkpoint(dname, backup.status.checkpoint)
                except NotFound:
                    pass  # the domain is gone, and its checkpoints with it
        target = ctx.read(BackupTarget, backup.spec.target)
        if target is None or not backup.status.disks:
            return True
        driver = await target_driver(ctx, target, backup.status.host)
        if driver is None:
            return False
        for disk in backup.status.disks:
            await driver.delete_volume(target_ref(target), disk.backup_volume)
        return True

    async def _delete(self, backup: VirtualMachineBackup) -> Result | None:
        ctx = self.ctx
        try:
            if not await self._remove_data(backup):
                return Result(requeue_after=5.0)
        except DriverError as exc:
            log.info("backup %s: deleting: %s; retrying", backup.metadata.name, exc)
            return Result(requeue_after=5.0)
        if FINALIZER in backup.metadata.finalizers:
            backup.metadata.finalizers.remove(FINALIZER)
            backup = await ctx.write(backup)
        if not backup.metadata.finalizers:
            ctx.event(
                ("VirtualMachine", backup.spec.vm), "BackupDeleted", f"backup {backup.metadata.name} removed"
            )
            await ctx.write(Removal(VirtualMachineBackup, backup.metadata.name))
        return None


CONTROLLER = Registration(
    VirtualMachineBackup.KIND, lambda parts: BackupReconciler(parts.ctx), (itself(VirtualMachineBackup.KIND),)
)
