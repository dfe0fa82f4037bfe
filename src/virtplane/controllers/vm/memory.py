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
from typing import TYPE_CHECKING

from virtplane.controllers.vm.durable import DurablePoint
from virtplane.domain.conditions import VMCondition, remove_condition, set_condition
from virtplane.domain.resources import SnapshotPhase, VirtualMachineSnapshot
from virtplane.drivers.base import DomainSpec, HypervisorDriver
from virtplane.drivers.errors import DriverError

if TYPE_CHECKING:
    from virtplane.controllers.vm.state import VMState

log = logging.getLogger("virtplane.controllers.vm.memory")

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


async def start_domain(state: VMState, driver: HypervisorDriver, spec: DomainSpec) -> None:
    """Start the VM's (defined) domain: from saved memory if it carries that intent, else cold.
    The outcome goes on the state (written with the reconcile); a cold boot that replaces a
    resume is durable first."""
    snapshot = state.intents.resume_from_memory
    if snapshot is None:
        # MemoryRestored tells how the start after a restore went; a plain start ends its truth
        state.status.conditions = remove_condition(state.status.conditions, VMCondition.MEMORY_RESTORED)
        await driver.start(spec.name)
        return
    snap = state.ctx.read(VirtualMachineSnapshot, snapshot)
    problem = _unusable(snap, snapshot, spec)
    if problem is None and snap is not None and snap.status.memory_handle:
        try:
            await driver.restore_memory(spec, snap.status.memory_handle)
        except DriverError as exc:
            problem = f"the hypervisor could not use the saved memory: {_without_paths(str(exc))}"
        else:
            state.ctx.event(
                state.vm, "ResumedFromMemory", f"resumed from the memory saved in snapshot {snapshot}"
            )
            _record(state, True, "ResumedFromMemory", f"resumed from snapshot {snapshot}")
            return
    message = f"booted cold: {problem}"
    _record(state, False, "ColdBoot", message)
    state.ctx.event(state.vm, "ColdBoot", message, warning=True)
    log.info("VM %s: %s", state.name, message)
    await state.durable(DurablePoint.COLD_BOOT)
    await driver.start(spec.name)


def _record(state: VMState, resumed: bool, reason: str, message: str) -> None:
    """The outcome on the VM, in the write that drops the used intent."""
    state.intents = state.intents.with_(resume_from_memory=None)
    state.status.conditions = set_condition(
        state.status.conditions, VMCondition.MEMORY_RESTORED, resumed, reason, message, now=state.now
    )
