"""How the VM controller starts a domain: cold, or from a snapshot's saved memory.

After a restore of a snapshot taken with memory of a VM that was Running before the
restore, the VM carries the intent ``resume-from-memory`` (written with the restore's
overwrite, see ``domain.intents.memory_resume_stands``). Its next start restores the
saved memory, so the guest goes on from the moment of the snapshot. When the image
cannot be used (the snapshot or its memory is gone, a disk was not restored, the
hypervisor refuses it: a different CPU, a missing file), the guest boots cold and the
condition MemoryRestored=False says why; the intent is dropped, durably, before the
cold start, so a crash in between never resumes the image later.
"""

from __future__ import annotations

import logging
import re

from virtplane.controllers.context import ControllerContext
from virtplane.domain.conditions import VMCondition, set_condition
from virtplane.domain.intents import read_intents, write_intents
from virtplane.domain.resources import SnapshotPhase, VirtualMachine, VirtualMachineSnapshot
from virtplane.drivers.base import DomainSpec, HypervisorDriver
from virtplane.drivers.errors import DriverError

log = logging.getLogger("virtplane.controllers.memory_resume")

__all__ = ["start_domain"]

# A file or directory on a host: an operator must not learn paths outside the library.
_HOST_PATH = re.compile(r"(?<![\w:/])/[^\s'\",;)]*")


def _without_paths(text: str) -> str:
    return _HOST_PATH.sub("<path>", text)


def _unusable(snap: VirtualMachineSnapshot | None, name: str, spec: DomainSpec) -> str | None:
    """Why the snapshot's memory cannot be resumed into ``spec``, or None."""
    if snap is None or snap.status.phase is not SnapshotPhase.READY:
        return f"snapshot {name} is gone"
    if not snap.status.memory_handle:
        return f"snapshot {name} has no saved memory"
    restored = {d.volume for d in spec.disks}
    missing = sorted(d.volume for d in snap.status.disk_snapshots if d.volume not in restored)
    if missing:
        return f"disk(s) {', '.join(missing)} of snapshot {name} were not restored"
    return None


async def start_domain(
    ctx: ControllerContext, vm: VirtualMachine, driver: HypervisorDriver, spec: DomainSpec
) -> VirtualMachine:
    """Start ``vm``'s (defined) domain: from saved memory if it carries that intent, else cold.
    Returns the VM as last written."""
    snapshot = read_intents(vm.metadata.annotations).resume_from_memory
    if snapshot is None:
        await driver.start(spec.name)
        return vm
    snap = ctx.store.find(VirtualMachineSnapshot, snapshot)
    problem = _unusable(snap, snapshot, spec)
    if problem is None and snap is not None and snap.status.memory_handle:
        try:
            await driver.restore_memory(spec, snap.status.memory_handle)
        except DriverError as exc:
            problem = f"the hypervisor could not use the saved memory: {_without_paths(str(exc))}"
        else:
            ctx.event(vm, "ResumedFromMemory", f"resumed from the memory saved in snapshot {snapshot}")
            return _record(ctx, vm, True, "ResumedFromMemory", f"resumed from snapshot {snapshot}")
    message = f"booted cold: {problem}"
    vm = _record(ctx, vm, False, "ColdBoot", message)
    ctx.event(vm, "ColdBoot", message, warning=True)
    log.info("VM %s: %s", vm.metadata.name, message)
    await driver.start(spec.name)
    return vm


def _record(
    ctx: ControllerContext, vm: VirtualMachine, resumed: bool, reason: str, message: str
) -> VirtualMachine:
    """The outcome on the VM, in the same write that drops the used intent."""
    new = vm.model_copy(deep=True)
    intents = read_intents(new.metadata.annotations)
    new.metadata.annotations = write_intents(new.metadata.annotations, intents.with_(resume_from_memory=None))
    new.status.conditions = set_condition(
        new.status.conditions, VMCondition.MEMORY_RESTORED, resumed, reason, message, now=ctx.now()
    )
    written = ctx.write(new)
    return written
