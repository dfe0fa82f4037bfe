"""Named points where a test can make the server die with SIGKILL, to prove crash safety.

``VIRTPLANE_CRASH_AT=name[,name...]`` in the server's environment kills the
process the first time execution reaches one of those points: no clean-up, no
flush, exactly like a power cut of the control plane. Unset, a crash point costs
one dict lookup.
"""

from __future__ import annotations

import os
import signal

_ARMED = frozenset(p.strip() for p in os.environ.get("VIRTPLANE_CRASH_AT", "").split(",") if p.strip())

POINTS = (
    # Every durable point of a controller (``ControllerContext.durable``) is one, right after
    # its write; the VM's are named in ``controllers.vm.durable``.
    "restore.entered-maintenance",  # the intent and hold are stored, nothing torn down yet
    "restore.disk-restored",  # one disk is put back from its source (recorded on the operation), maybe not all
    "restore.overwritten",  # disks reverted and the VM overwritten from the snapshot
    "restore.exited-maintenance",  # the hold is gone, the power state not brought back yet
    "vm.domain-recreated",  # the domain was defined again, the intent not yet consumed
    "vm.before-start",  # the start request is stored, the domain not started
    "vm.seed-written",  # a new seed file is on the host, the domain not yet defined with it
    "vm.placed",  # the placement stands, its host does not answer yet
    "vm.recovery-slot-taken",  # a VM released from a fenced host holds a recovery slot, not started
    "vm.finalizer-removed",  # the domain is gone and the finalizer off, the VM's row not yet
    "host.before-fence",  # the fence is recorded on the host, the BMC not asked yet
    "host.fenced",  # the BMC confirmed the host off, the fence latched on the host's spec
    "migration.intent-written",  # the intent is on the VM, the source not asked to migrate yet
    "migration.seed-recorded",  # a local seed's copy is on the VM's record, not on the target yet
    "migration.seed-copied",  # a local seed is on the migration's target, the migration not yet begun
    "migration.volume-moved",  # a local disk's Volume points at the target's pool
    "migration.location-unknown",  # the hosts cannot say where the VM runs: it waits
    "migration.arrived",  # the VM is recorded on the target, its intent gone
    "migration.failed",  # the intent is gone, the VM stays on its source
    "maintenance.planned",  # the plan and the host's AskMaintenance are stored, no VM moved yet
    "maintenance.vm-held",  # a VM's power intent and hold are stored, the VM not stopped yet
    "maintenance.cancelling",  # the cancel is under way, no VM released and the host not moved yet
    "maintenance.host-returned",  # the host is back in service, the VMs not released yet
    "maintenance.vm-released",  # a VM maintenance stopped is released, not started yet
    "backup.planned",  # mode, checkpoint name and host are stored, the job not begun
    "backup.begun",  # the hypervisor's job runs (its checkpoint made), recorded on the backup
    "backup.failed",  # the failure is stored, its checkpoint and volumes not yet removed
    "backuppolicy.window",  # a policy's window and the VMs it picked are stored, no backup made yet
    "upgrade.before-commit",  # the store's upgrade done and backed up, its transaction not committed
)


def crashpoint(name: str) -> None:
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
