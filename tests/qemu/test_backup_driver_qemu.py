"""The libvirt driver's backups on a real guest (issue 36's driver part): a full backup, an
incremental one that writes only what changed and reads as the whole disk with its base, a
retried begin that starts nothing new, checkpoints carried over a live migration, and the
chain verified with qemu-img.

The guest writes ``DISKTICK n`` into sector 1 of its disk every tick, so each backup's chain
holds the tick of its moment: a newer backup, a newer tick.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from virtplane.drivers.backups import BackupJob, BackupJobState, BackupRequest, DiskBackup
from virtplane.drivers.base import DiskAttachment, MigrationPhase, MigrationRequest, PoolRef

from .conftest import Rig, console_shows, eventually, guest_spec
from .test_qemu_guests import finished_job

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

GIB = 1024**3


async def finished_backup(driver: Any, name: str) -> BackupJob:
    async def probe() -> BackupJob:
        job: BackupJob = await driver.backup_job(name)
        return job

    return await eventually(probe, lambda j: j.state is not BackupJobState.RUNNING, 120.0)


def tick_in(chain_top: Path, tmp_path: Path) -> int:
    """The DISKTICK number in sector 1 of the disk the backup chain ending at ``chain_top`` holds."""
    out = tmp_path / f"{chain_top.name}.sector"
    subprocess.run(
        ["qemu-img", "dd", "-f", "qcow2", "-O", "raw", "bs=512", "count=2", f"if={chain_top}", f"of={out}"],
        check=True,
        capture_output=True,
    )
    found = re.search(rb"DISKTICK (\d+)", out.read_bytes()[512:])
    assert found is not None, f"no DISKTICK in sector 1 of {chain_top}"
    return int(found.group(1))


def ticks(rig: Rig, domain: str) -> int:
    return rig.console(domain).count("TICK ") - rig.console(domain).count("DISKTICK ")


async def test_full_then_incremental_backups_and_checkpoints_over_a_migration(
    rig: Rig, drivers: dict[str, Any], tmp_path: Path
) -> None:
    a, b = drivers["a"], drivers["b"]
    vol = await a.create_volume(rig.shared_pool, "bk-root.qcow2", 1)
    spec = guest_spec(rig, "bk", (DiskAttachment(path=vol.path, boot_order=1, shared=True),))
    # its own directory: a pool the daemons keep on a path another test's BackupTarget uses would
    # make libvirt refuse that target's pool ("Storage source conflict with pool")
    target = PoolRef(name="driver-backups", path=str(rig.base / "shared" / "driver-backups"), shared=True)
    name = spec.name
    await a.ensure_defined(spec)
    await a.start(name)
    await console_shows(rig, name, "TICK 2")

    def request(checkpoint: str, volume: str, base: str | None, since: str | None) -> BackupRequest:
        disk = DiskBackup(disk_path=vol.path, volume=volume, size_bytes=GIB, base_volume=base)
        return BackupRequest(
            domain=name, target=target, checkpoint=checkpoint, disks=(disk,), incremental_from=since
        )

    # full
    await a.begin_backup(request("cp-1", "bk-1.qcow2", None, None))
    full = await finished_backup(a, name)
    assert full.state is BackupJobState.SUCCEEDED, full.error
    assert await a.checkpoints(name) == ("cp-1",)
    await a.begin_backup(request("cp-1", "bk-1.qcow2", None, None))  # a retry: it began already
    assert await a.checkpoints(name) == ("cp-1",)
    assert (await a.backup_job(name)).state is BackupJobState.SUCCEEDED
    first = tick_in(Path(target.path) / "bk-1.qcow2", tmp_path)

    # incremental: only the clusters written since cp-1, read whole through its base
    await console_shows(rig, name, "TICK ", count=ticks(rig, name) + 2)
    await a.begin_backup(request("cp-2", "bk-2.qcow2", "bk-1.qcow2", "cp-1"))
    incremental = await finished_backup(a, name)
    assert incremental.state is BackupJobState.SUCCEEDED, incremental.error
    assert 0 < incremental.total_bytes <= 1024**2 < full.total_bytes  # a cluster or two of a 1 GiB disk
    second = tick_in(Path(target.path) / "bk-2.qcow2", tmp_path)
    assert second > first
    assert await a.checkpoints(name) == ("cp-1", "cp-2")

    # a live migration carries the bitmaps (in the shared qcow2), not the checkpoints: redefined
    definitions = await a.checkpoint_definitions(name)
    await a.migrate(MigrationRequest(domain=name, target_uri=rig.hosts["b"].uri))
    moved = await finished_job(a, name)
    assert moved.phase is MigrationPhase.COMPLETED, moved.error
    assert await b.checkpoints(name) == ()
    await b.redefine_checkpoints(name, definitions)
    await b.redefine_checkpoints(name, definitions)  # again: those defined are left alone
    assert await b.checkpoints(name) == ("cp-1", "cp-2")
    await console_shows(rig, name, "TICK ", count=ticks(rig, name) + 2)
    await b.begin_backup(request("cp-3", "bk-3.qcow2", "bk-2.qcow2", "cp-2"))
    after_move = await finished_backup(b, name)
    assert after_move.state is BackupJobState.SUCCEEDED, after_move.error
    assert after_move.total_bytes <= 1024**2
    assert tick_in(Path(target.path) / "bk-3.qcow2", tmp_path) > second

    # verify (qemu-img on this machine, which sees the shared directory at the hosts' path)
    check = await b.verify_backup(target, (("bk-3.qcow2", "bk-2.qcow2", "bk-1.qcow2"),))
    assert (check.ok, check.message) == (True, "3 file(s) of 1 disk(s) checked, each disk read whole")
    check = await b.verify_backup(target, (("bk-3.qcow2", "bk-1.qcow2"),))  # the record is wrong
    assert not check.ok and "its chain is bk-3.qcow2 <- bk-2.qcow2 <- bk-1.qcow2" in check.message

    await b.delete_checkpoint(name, "cp-1")
    await b.delete_checkpoint(name, "cp-1")  # gone already: no error
    assert await b.checkpoints(name) == ("cp-2", "cp-3")
    await b.destroy(name)
    await b.undefine(name)  # with checkpoints: undefine drops their metadata too
    await a.delete_volume(rig.shared_pool, "bk-root.qcow2")
