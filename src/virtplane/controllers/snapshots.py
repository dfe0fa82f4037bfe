"""The snapshot controller: captures a VM's spec, labels, user annotations and every disk.

Disk snapshots are data the control plane owns (driver handles to saved images),
never libvirt snapshot metadata on the domain, so a VM with snapshots stays
migratable. System annotations (intents) are never captured: a restore must not
bring back a stale intent.
"""

from __future__ import annotations

import contextlib
import logging

from virtplane.controllers.context import ControllerContext, Removal
from virtplane.controllers.registration import Registration
from virtplane.controllers.storage import pool_driver, pool_ref, volume_file
from virtplane.controllers.watch import itself
from virtplane.domain.intents import strip_system
from virtplane.domain.phases import LIVE_PHASES
from virtplane.domain.resources import (
    CapturedVM,
    DiskSnapshot,
    SnapshotConsistency,
    SnapshotPhase,
    StoragePool,
    VirtualMachine,
    VirtualMachineSnapshot,
    VMPhase,
    Volume,
)
from virtplane.drivers.base import HypervisorDriver, domain_name
from virtplane.drivers.errors import DriverError, NotFound, PermanentError
from virtplane.reconcile.types import Request, Result

log = logging.getLogger("virtplane.controllers.snapshots")

FINALIZER = "virtplane.io/snapshot-data"


def snapshot_id(snapshot: VirtualMachineSnapshot, volume: str) -> str:
    """Deterministic name of a disk snapshot, so a retried capture reuses it."""
    return f"snap-{snapshot.metadata.uid}-{volume}"


class SnapshotReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def _vm_driver(self, vm: VirtualMachine) -> HypervisorDriver | None:
        if not vm.status.host:
            return None
        host = self.ctx.cache.host(vm.status.host)
        return None if host is None else await self.ctx.hosts.get(host.spec.uri)

    async def _disk_driver(self, vm: VirtualMachine | None, pool: StoragePool) -> HypervisorDriver | None:
        if vm is not None and vm.status.host and vm.status.phase in LIVE_PHASES:
            return await self._vm_driver(vm)  # a live disk is reached through the host running it
        return await pool_driver(self.ctx, pool)

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        snap = ctx.read(VirtualMachineSnapshot, req.name, to_change=True)
        if snap is None:
            return None
        if snap.metadata.deletion_requested_at is not None:
            return await self._delete(snap)
        if snap.status.phase in (SnapshotPhase.READY, SnapshotPhase.FAILED):
            return None
        if FINALIZER not in snap.metadata.finalizers:
            snap.metadata.finalizers.append(FINALIZER)
            snap = await ctx.write(snap)
        vm = ctx.read(VirtualMachine, snap.spec.vm)
        if vm is None:
            return await self._fail(snap, f"VM {snap.spec.vm} does not exist")
        if snap.status.phase is SnapshotPhase.PENDING:
            snap.status.phase = SnapshotPhase.IN_PROGRESS
            snap.status.captured = CapturedVM(
                spec=vm.spec,
                labels=dict(vm.metadata.labels),
                annotations=strip_system(vm.metadata.annotations),
            )
            live = vm.status.phase in LIVE_PHASES
            snap.status.power_state = "Running" if live else "Stopped"
            snap.status.host = vm.status.host
            ctx.event(snap, "InProgress", f"capturing VM {vm.metadata.name} ({snap.status.power_state})")
            snap = await ctx.write(snap)
        return await self._capture(snap, vm)

    async def _capture(self, snap: VirtualMachineSnapshot, vm: VirtualMachine) -> Result | None:
        ctx = self.ctx
        live = snap.status.power_state == "Running"
        dname = domain_name(vm.metadata.uid)
        paused_here = frozen = False
        vm_driver = await self._vm_driver(vm) if live else None
        try:
            done = {d.volume for d in snap.status.disk_snapshots}
            left = [disk for disk in vm.spec.disks if disk.volume not in done]
            if not live:
                self._consistency(snap, SnapshotConsistency.POWERED_OFF, "the VM was stopped")
            elif left and vm_driver is not None:
                frozen = await self._freeze(snap, vm, vm_driver)
            consistent = snap.spec.required_consistency or snap.spec.with_memory
            if live and consistent and vm_driver is not None and vm.status.phase is not VMPhase.PAUSED:
                # Freeze the guest while its disks (and memory) are saved: consistent disks, and a
                # memory image that matches them, so a restore can resume it. One paused by its
                # owner stays paused.
                await vm_driver.pause(dname)
                paused_here = True
            for disk in left:
                volume = ctx.read(Volume, disk.volume)
                pool = ctx.read(StoragePool, volume.spec.pool) if volume else None
                if volume is None or pool is None:
                    return await self._fail(snap, f"disk {disk.volume} has no volume or pool")
                driver = await self._disk_driver(vm, pool)
                if driver is None:
                    return Result(requeue_after=2.0)
                handle = await driver.snapshot_volume(
                    pool_ref(pool), volume_file(volume), snapshot_id(snap, disk.volume)
                )
                snap.status.disk_snapshots.append(
                    DiskSnapshot(volume=disk.volume, handle=handle, size_gib=volume.spec.size_gib)
                )
                snap = await ctx.write(snap)  # each handle is durable before the next disk
            if live and snap.spec.with_memory and snap.status.memory_handle is None and vm_driver is not None:
                snap.status.memory_handle = await vm_driver.save_memory(
                    dname, f"snap-{snap.metadata.uid}-memory"
                )
            if live and snap.spec.required_consistency and not snap.spec.with_memory and vm_driver is None:
                return await self._fail(
                    snap, "required_consistency: the VM's host is not reachable to freeze it"
                )
        except PermanentError as exc:
            return await self._fail(snap, f"capture failed: {exc}")
        except DriverError as exc:
            log.info("snapshot %s: %s; retrying", snap.metadata.name, exc)
            return Result(requeue_after=2.0)
        finally:
            if paused_here and vm_driver is not None:
                try:
                    await vm_driver.resume(dname)
                except DriverError as exc:
                    log.warning("could not resume %s after the snapshot: %s", vm.metadata.name, exc)
            if frozen and vm_driver is not None:  # always, also when the copy failed
                await self._thaw(vm, vm_driver)
        snap.status.phase = SnapshotPhase.READY
        snap.status.message = f"{len(snap.status.disk_snapshots)} disk(s)" + (
            ", with memory" if snap.status.memory_handle else ""
        )
        if snap.status.consistency is not None:
            snap.status.message += f", {snap.status.consistency.value}"
        ctx.event(snap, "Ready", snap.status.message)
        ctx.event(vm, "SnapshotTaken", f"snapshot {snap.metadata.name}: {snap.status.message}")
        await ctx.write(snap)
        return None

    @staticmethod
    def _consistency(snap: VirtualMachineSnapshot, consistency: SnapshotConsistency, reason: str) -> None:
        """Record how consistent the disks saved in this pass are; a snapshot taken over several
        passes is only as consistent as its weakest one."""
        if snap.status.consistency is SnapshotConsistency.CRASH_CONSISTENT:
            return
        snap.status.consistency, snap.status.consistency_reason = consistency, reason

    async def _freeze(
        self, snap: VirtualMachineSnapshot, vm: VirtualMachine, driver: HypervisorDriver
    ) -> bool:
        """Freeze the guest's filesystems through its agent, when it has one; whether it did."""
        dname = domain_name(vm.metadata.uid)
        crash = SnapshotConsistency.CRASH_CONSISTENT
        if snap.spec.with_memory:
            # a frozen guest in the memory image would come back frozen from a restore; the
            # pause makes disks and memory match, and the restore resumes the guest as it was
            self._consistency(snap, crash, "with memory: the guest was paused, not frozen")
            return False
        if vm.status.phase is VMPhase.PAUSED:
            self._consistency(snap, crash, "the VM is paused: its agent cannot freeze it")
            return False
        try:
            if not await driver.agent_connected(dname):
                self._consistency(
                    snap, crash, "no guest agent is connected: the disks are as after a power cut"
                )
                return False
            count = await driver.freeze_filesystems(dname)
        except DriverError as exc:
            self._consistency(snap, crash, f"the guest agent did not freeze the filesystems: {exc}")
            return False
        self._consistency(
            snap, SnapshotConsistency.FILESYSTEM_FROZEN, f"the guest agent froze {count} filesystem(s)"
        )
        return True

    async def _thaw(self, vm: VirtualMachine, driver: HypervisorDriver) -> None:
        try:
            await driver.thaw_filesystems(domain_name(vm.metadata.uid))
        except DriverError as exc:
            log.warning("could not thaw the filesystems of %s: %s", vm.metadata.name, exc)
            self.ctx.event(
                vm, "ThawFailed", f"its filesystems may still be frozen after a snapshot: {exc}", warning=True
            )

    async def _fail(self, snap: VirtualMachineSnapshot, message: str) -> Result | None:
        snap.status.phase = SnapshotPhase.FAILED
        snap.status.message = message
        self.ctx.event(snap, "Failed", message, warning=True)
        await self.ctx.write(snap)
        return None

    async def _delete(self, snap: VirtualMachineSnapshot) -> Result | None:
        ctx = self.ctx
        vm = ctx.read(VirtualMachine, snap.spec.vm)
        for disk in list(snap.status.disk_snapshots):
            volume = ctx.read(Volume, disk.volume)
            pool = ctx.read(StoragePool, volume.spec.pool) if volume else None
            driver = await self._disk_driver(vm, pool) if pool else None
            if driver is None and pool is not None:
                return Result(requeue_after=2.0)
            if driver is not None:
                with contextlib.suppress(NotFound):
                    await driver.delete_volume_snapshot(disk.handle)
            snap.status.disk_snapshots.remove(disk)
            snap = await ctx.write(snap)
        if snap.status.memory_handle and vm is not None:
            driver = await self._vm_driver(vm) or None
            if driver is not None:
                try:
                    await driver.delete_volume_snapshot(snap.status.memory_handle)
                except DriverError:
                    log.info("memory state of %s already gone", snap.metadata.name)
        if FINALIZER in snap.metadata.finalizers:
            snap.metadata.finalizers.remove(FINALIZER)
            snap = await ctx.write(snap)
        if not snap.metadata.finalizers:
            await ctx.write(Removal(VirtualMachineSnapshot, snap.metadata.name))
            ctx.event(
                ("VirtualMachine", snap.spec.vm),
                "SnapshotDeleted",
                f"snapshot {snap.metadata.name} and its disk data removed",
            )
        return None


WATCHES = (itself(VirtualMachineSnapshot.KIND),)
"""A snapshot is looked at when it changes, and on resync: nothing else wakes it."""

CONTROLLER = Registration(
    VirtualMachineSnapshot.KIND, lambda parts: SnapshotReconciler(parts.ctx), WATCHES, workers=2
)
