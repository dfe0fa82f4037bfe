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
    "restore.entered-maintenance",  # the intent and hold are stored, nothing torn down yet
    "restore.overwritten",  # disks reverted and the VM overwritten from the snapshot
    "vm.domain-recreated",  # the domain was defined again, the intent not yet consumed
    "vm.before-start",  # the start request is stored, the domain not started
    "host.before-fence",  # the fence is recorded on the host, the BMC not asked yet
    "vm.seed-written",  # a new seed file is on the host, the domain not yet defined with it
    "migration.seed-copied",  # a local seed is on the migration's target, the migration not yet begun
    "maintenance.planned",  # the plan and the host's AskMaintenance are stored, no VM moved yet
    "maintenance.vm-held",  # a VM's power intent and hold are stored, the VM not stopped yet
    "maintenance.cancelling",  # the cancel is under way, no VM released and the host not moved yet
    "upgrade.before-commit",  # the store's upgrade done and backed up, its transaction not committed
)


def crashpoint(name: str) -> None:
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
