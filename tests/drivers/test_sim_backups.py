"""The simulator's backups behave as libvirt's (``drivers/sim/_backups``): a job takes time in
proportion to what it copies, an incremental copies what the guest wrote since its checkpoint,
one job per domain at a time, checkpoints belong to the domain's record on its host, and all of
it survives a restart of the simulator. Time is the fake clock's: no sleeps.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from virtplane.drivers.backups import BackupJobState, BackupRequest, DiskBackup
from virtplane.drivers.base import (
    DiskAttachment,
    DomainSpec,
    DomainState,
    MigrationRequest,
    PoolRef,
    domain_name,
)
from virtplane.drivers.errors import NotRunning, PermanentError, TransientError
from virtplane.drivers.sim import SimCloud, SimDriver, SimGuest
from virtplane.drivers.sim._backup_records import SimCheckpoint

from .conftest import eventually
from .test_sim_persistence import Clock, life

GIB = 1024**3
MIB = 1024**2
DISKS = PoolRef(name="disks", path="disks", shared=True)
TARGET = PoolRef(name="backups", path="backups", shared=True)
NAME = domain_name("vm-1")
DISK = "sim://disks/vm-1-root"


def world(clock: Clock, state_path: Path | None = None) -> tuple[SimCloud, SimDriver, SimDriver]:
    cloud = SimCloud(boot_seconds=0, shutdown_seconds=0, clock=clock, backup_mib_s=100, state_path=state_path)
    return cloud, cloud.driver("sim://h1"), cloud.driver("sim://h2")


async def running_vm(cloud: SimCloud, clock: Clock) -> tuple[SimDriver, SimDriver]:
    for name in ("h1", "h2"):
        cloud.add_host(name, vcpus=8, memory_mib=8192)
    h1, h2 = cloud.driver("sim://h1"), cloud.driver("sim://h2")
    for host in (h1, h2):
        await host.connect()
        await host.ensure_pool(DISKS)
    await h1.create_volume(DISKS, "vm-1-root", 1)
    cloud.write_volume(DISK, "base system")
    spec = DomainSpec(
        name=NAME, vm_name="vm", vm_uid="vm-1", cpu=1, memory_mib=256, disks=(DiskAttachment(path=DISK),)
    )
    await h1.ensure_defined(spec)
    await h1.start(NAME)
    return h1, h2


def request(checkpoint: str, since: str | None = None, base: str | None = None) -> BackupRequest:
    volume = f"vm-1-root.{checkpoint}"
    disk = DiskBackup(disk_path=DISK, volume=volume, size_bytes=GIB, base_volume=base)
    return BackupRequest(NAME, TARGET, checkpoint, (disk,), incremental_from=since)


async def test_a_full_backup_takes_the_disks_size_over_the_rate_and_holds_the_disk_as_it_began() -> None:
    clock = Clock()
    cloud, _, _ = world(clock)
    h1, _ = await running_vm(cloud, clock)
    await h1.begin_backup(request("cp-1"))
    cloud.write_volume(DISK, "written after the backup began")
    clock.now += 5.0  # 500 MiB of 1024 at 100 MiB/s
    job = await h1.backup_job(NAME)
    assert (job.state, job.total_bytes, job.processed_bytes) == (BackupJobState.RUNNING, GIB, 500 * MIB)
    assert cloud.read_volume("sim://backups/vm-1-root.cp-1") == "", "nothing to read before it ends"
    clock.now += 5.24
    job = await h1.backup_job(NAME)
    assert (job.state, job.processed_bytes) == (BackupJobState.SUCCEEDED, GIB)
    assert cloud.read_volume("sim://backups/vm-1-root.cp-1") == "base system"
    assert await h1.checkpoints(NAME) == ("cp-1",)
    await h1.begin_backup(request("cp-1"))  # a retry: the checkpoint says it began
    assert (await h1.backup_job(NAME)).state is BackupJobState.SUCCEEDED


async def test_an_incremental_copies_what_the_guest_wrote_since_its_checkpoint() -> None:
    clock = Clock()
    cloud, _, _ = world(clock)
    h1, _ = await running_vm(cloud, clock)
    cloud.set_guest(NAME, SimGuest(disk_write_mib_s=2.0))
    await h1.begin_backup(request("cp-1"))
    clock.now += 20.0  # the full one's 10.24 s, then the guest writes on
    assert (await h1.backup_job(NAME)).state is BackupJobState.SUCCEEDED
    await h1.begin_backup(request("cp-2", since="cp-1", base="vm-1-root.cp-1"))
    assert (await h1.backup_job(NAME)).total_bytes == 40 * MIB  # 20 s at 2 MiB/s
    clock.now += 0.4
    assert (await h1.backup_job(NAME)).state is BackupJobState.SUCCEEDED
    cloud.set_guest(NAME, SimGuest())
    cloud.write_volume(DISK, "a new file")  # content changed: one 64 KiB cluster
    await h1.begin_backup(request("cp-3", since="cp-2", base="vm-1-root.cp-2"))
    assert (await h1.backup_job(NAME)).total_bytes == 64 * 1024
    assert await h1.checkpoints(NAME) == ("cp-1", "cp-2", "cp-3")
    await h1.delete_checkpoint(NAME, "cp-2")
    await h1.delete_checkpoint(NAME, "cp-2")  # a missing one is no error
    assert await h1.checkpoints(NAME) == ("cp-1", "cp-3")


async def test_one_job_per_domain_and_none_during_a_migration() -> None:
    clock = Clock()
    cloud, _, _ = world(clock)
    h1, h2 = await running_vm(cloud, clock)
    await h1.begin_backup(request("cp-1"))
    with pytest.raises(TransientError, match="backup job runs"):
        await h1.begin_backup(request("cp-other"))
    with pytest.raises(TransientError, match="backup job running"):
        await h1.migrate(MigrationRequest(domain=NAME, target_uri=h2.uri))
    await h1.abort_backup(NAME)
    job = await h1.backup_job(NAME)
    assert (job.state, job.error) == (BackupJobState.FAILED, "the backup job was aborted")
    assert cloud.read_volume("sim://backups/vm-1-root.cp-1") == ""  # left for the caller to delete
    with pytest.raises(PermanentError, match="not found"):
        await h1.begin_backup(request("cp-2", since="cp-gone", base="vm-1-root.cp-1"))
    with pytest.raises(PermanentError, match="no disks selected for backup"):  # as libvirt
        await h1.begin_backup(BackupRequest(NAME, TARGET, "cp-3", ()))


async def test_a_domain_that_stops_fails_its_job_and_a_stopped_one_cannot_begin() -> None:
    clock = Clock()
    cloud, _, _ = world(clock)
    h1, _ = await running_vm(cloud, clock)
    await h1.begin_backup(request("cp-1"))
    await h1.destroy(NAME)
    job = await h1.backup_job(NAME)
    assert job.state is BackupJobState.FAILED and "stopped during the backup" in job.error
    clock.now += 60
    assert (await h1.backup_job(NAME)).state is BackupJobState.FAILED, "an ended job stays ended"
    with pytest.raises(NotRunning):
        await h1.begin_backup(request("cp-2"))
    assert await h1.checkpoints(NAME) == ("cp-1",), "kept while the domain is defined"
    await h1.start(NAME)
    assert await h1.checkpoints(NAME) == ("cp-1",), "kept across a stop and start"
    await h1.destroy(NAME)
    await h1.undefine(NAME)
    await h1.ensure_defined(DomainSpec(name=NAME, vm_name="vm", vm_uid="vm-1", cpu=1, memory_mib=256))
    assert await h1.checkpoints(NAME) == (), "dropped by undefine"


async def test_a_migration_does_not_carry_the_checkpoints_until_they_are_redefined() -> None:
    clock = Clock()
    cloud, _, _ = world(clock)
    h1, h2 = await running_vm(cloud, clock)
    await h1.begin_backup(request("cp-1"))
    clock.now += 11
    assert (await h1.backup_job(NAME)).state is BackupJobState.SUCCEEDED
    definitions = await h1.checkpoint_definitions(NAME)
    await h1.migrate(MigrationRequest(domain=NAME, target_uri=h2.uri))
    await eventually(lambda: h2.get_info(NAME), lambda i: i is not None and i.state is DomainState.RUNNING)
    assert await h2.checkpoints(NAME) == ()
    with pytest.raises(PermanentError, match="not found"):
        await h2.begin_backup(request("cp-2", since="cp-1", base="vm-1-root.cp-1"))
    await h2.redefine_checkpoints(NAME, definitions)
    await h2.redefine_checkpoints(NAME, definitions)  # those defined already stay as they are
    assert await h2.checkpoints(NAME) == ("cp-1",)
    await h2.begin_backup(request("cp-2", since="cp-1", base="vm-1-root.cp-1"))
    assert (await h2.backup_job(NAME)).total_bytes == 0  # nothing written since


def test_a_restarted_simulator_finds_the_job_where_the_time_took_it_and_the_checkpoints(
    tmp_path: Path,
) -> None:
    path, clock = tmp_path / "sim.db", Clock()

    async def first_life() -> None:
        cloud, _, _ = world(clock, path)
        h1, _ = await running_vm(cloud, clock)
        await h1.begin_backup(request("cp-1"))
        clock.now += 5.0

    life(first_life)  # killed mid-job: nothing flushed on the way out

    async def second_life() -> None:
        _, h1, _ = world(clock, path)
        await h1.connect()
        job = await h1.backup_job(NAME)
        assert (job.state, job.processed_bytes) == (BackupJobState.RUNNING, 500 * MIB)
        clock.now += 6.0
        assert (await h1.backup_job(NAME)).state is BackupJobState.SUCCEEDED
        assert await h1.checkpoints(NAME) == ("cp-1",)

    life(second_life)

    async def third_life() -> None:
        cloud, h1, _ = world(clock, path)
        await h1.connect()
        assert (await h1.backup_job(NAME)).state is BackupJobState.SUCCEEDED
        assert cloud.read_volume("sim://backups/vm-1-root.cp-1") == "base system"
        definitions = await h1.checkpoint_definitions(NAME)
        assert [SimCheckpoint.from_definition(d).disks for d in definitions] == [((DISK, "base system"),)]

    life(third_life)


def test_a_state_file_of_version_4_gets_domains_without_checkpoints_or_jobs(tmp_path: Path) -> None:
    path, clock = tmp_path / "sim.db", Clock()

    async def first_life() -> None:
        cloud, _, _ = world(clock, path)
        await running_vm(cloud, clock)

    life(first_life)
    with sqlite3.connect(path) as conn:  # as version 4 wrote it
        conn.execute("ALTER TABLE domains DROP COLUMN checkpoints")
        conn.execute("ALTER TABLE domains DROP COLUMN backup")
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema'")

    async def second_life() -> None:
        cloud, h1, _ = world(clock, path)
        await h1.connect()
        assert await h1.checkpoints(NAME) == ()
        assert (await h1.backup_job(NAME)).state is BackupJobState.UNKNOWN
        await h1.begin_backup(request("cp-1"))
        cloud.close()

    life(second_life)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("5",)
        assert conn.execute("SELECT checkpoints FROM domains").fetchone() != ("[]",)
