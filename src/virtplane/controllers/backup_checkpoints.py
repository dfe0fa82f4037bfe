"""A backup's checkpoint after its VM moved (issue 36): libvirt 9.0 carries a checkpoint's
dirty bitmap inside a shared qcow2 file over a live migration, but not its metadata
(/work/notes/backup-spike.md), so the next backup would find it gone and be full. A backup keeps
the definitions its host held once it succeeded (``status.checkpoint_definitions``: its own
checkpoint, the older ones dropped by then); the next backup redefines them on the VM's new
host and is incremental, and says so. Where that is refused (a bitmap that did not travel:
local disks) it is full, and says why.
"""

from __future__ import annotations

import logging

from virtplane.domain.resources import VirtualMachineBackup
from virtplane.drivers.base import HypervisorDriver
from virtplane.drivers.errors import DriverError

__all__ = ["checkpoint_on_host"]

log = logging.getLogger("virtplane.controllers.backups")


async def checkpoint_on_host(
    driver: HypervisorDriver, dname: str, newest: VirtualMachineBackup, host: str | None
) -> tuple[bool, str]:
    """Whether ``newest``'s checkpoint is on the VM's host (redefined there if need be), and
    what to add to the next backup's reason."""
    checkpoint = newest.status.checkpoint
    if checkpoint is None:
        return False, ""
    if checkpoint in await driver.checkpoints(dname):
        return True, ""
    definitions = tuple(newest.status.checkpoint_definitions)
    if not definitions:
        return False, ""
    try:
        await driver.redefine_checkpoints(dname, definitions)
    except DriverError as exc:
        log.info("checkpoint %s not redefined on %s: %s", checkpoint, host, exc)
        return False, f" (redefining it there failed: {exc})"
    if checkpoint not in await driver.checkpoints(dname):
        return False, ""
    return True, f" (its checkpoint {checkpoint} redefined on host {host} after the VM moved)"
