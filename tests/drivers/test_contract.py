"""One contract, every driver: the same operations, checked through get_info after each step.

Parametrized over libvirt's own test hypervisor (a per-test node XML, no
daemon; skipped where libvirt-python is missing, a failure in a full run) and
the simulated driver. Capabilities decide what is expected: an operation a
driver does not declare must raise Unsupported, one it declares must work.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from tests.conftest import libvirt_or_skip
from virtplane.domain.resources import ExitReason
from virtplane.drivers.backups import BackupJob, BackupJobState, BackupRequest, DiskBackup
from virtplane.drivers.base import (
    Capability,
    ConsoleStream,
    DiskAttachment,
    DomainEvent,
    DomainEventType,
    DomainInfo,
    DomainSpec,
    DomainState,
    HypervisorDriver,
    ImageRef,
    MigrationJob,
    MigrationPhase,
    MigrationRequest,
    PoolRef,
    domain_name,
)
from virtplane.drivers.errors import ConsoleBusy, NotFound, NotRunning, PermanentError, Unsupported

from .conftest import eventually, wait_for

GIB = 1024**3


@dataclass
class Harness:
    driver: HypervisorDriver
    pool: PoolRef
    events: list[DomainEvent]
    target: HypervisorDriver  # a second host of the same kind, for migrations


@pytest.fixture(params=["libvirt", "sim"])
async def harness(request: pytest.FixtureRequest, node_uri: Callable[[str], str]) -> AsyncIterator[Harness]:
    driver: HypervisorDriver
    target: HypervisorDriver
    if request.param == "libvirt":
        libvirt_or_skip()
        from virtplane.drivers.libvirt import LibvirtDriver

        driver = LibvirtDriver(node_uri("contract"))
        target = LibvirtDriver(node_uri("contract-target"))
        pool = PoolRef(name="contract-pool", path="/srv/contract-pool")
    else:
        from virtplane.drivers.sim import SimCloud

        cloud = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01, migration_tick_s=0.005, time_scale=10)
        driver = cloud.driver(cloud.add_host("contract", vcpus=8, memory_mib=16384))
        target = cloud.driver(cloud.add_host("contract-target", vcpus=8, memory_mib=16384))
        pool = PoolRef(name="contract-pool", path="contract-pool")
    events: list[DomainEvent] = []
    driver.set_event_sink(events.append)
    await driver.connect()
    await target.connect()
    await driver.ensure_pool(pool)
    yield Harness(driver, pool, events, target)
    await driver.close()
    await target.close()


def make_spec(uid: str, *, vm_name: str = "web-1", disks: tuple[DiskAttachment, ...] = ()) -> DomainSpec:
    return DomainSpec(name=domain_name(uid), vm_name=vm_name, vm_uid=uid, cpu=2, memory_mib=256, disks=disks)


async def state_of(driver: HypervisorDriver, name: str, state: DomainState) -> DomainInfo:
    async def probe() -> DomainInfo | None:
        return await driver.get_info(name)

    info = await eventually(probe, lambda i: i is not None and i.state is state)
    assert info is not None
    return info


async def running(h: Harness, uid: str = "vm-1", **kwargs: object) -> DomainSpec:
    spec = make_spec(uid, **kwargs)  # type: ignore[arg-type]
    await h.driver.ensure_defined(spec)
    await h.driver.start(spec.name)
    await state_of(h.driver, spec.name, DomainState.RUNNING)
    return spec


async def test_define_is_idempotent_and_reports_the_spec(harness: Harness) -> None:
    spec = make_spec("vm-define")
    await harness.driver.ensure_defined(spec)
    await harness.driver.ensure_defined(spec)
    info = await harness.driver.get_info(spec.name)
    assert info is not None
    assert (info.state, info.exit_reason, info.vm_uid) == (DomainState.SHUTOFF, None, "vm-define")
    assert (info.cpu, info.memory_mib) == (2, 256)
    listed = [d for d in await harness.driver.list_domains() if d.name == spec.name]
    assert [d.vm_uid for d in listed] == ["vm-define"]


async def test_unknown_domains(harness: Harness) -> None:
    assert await harness.driver.get_info(domain_name("nobody")) is None
    with pytest.raises(NotFound):
        await harness.driver.start(domain_name("nobody"))
    await harness.driver.destroy(domain_name("nobody"))
    await harness.driver.undefine(domain_name("nobody"))


async def test_start_then_graceful_shutdown_is_stopped_by_system(harness: Harness) -> None:
    spec = await running(harness)
    await harness.driver.start(spec.name)  # already running: nothing to do
    await harness.driver.shutdown(spec.name)
    info = await state_of(harness.driver, spec.name, DomainState.SHUTOFF)
    assert info.exit_reason is ExitReason.STOPPED_BY_SYSTEM
    await wait_for(
        lambda: any(e.type is DomainEventType.STARTED and e.domain == spec.name for e in harness.events)
    )
    await wait_for(
        lambda: any(
            e.type is DomainEventType.STOPPED and e.reason is ExitReason.STOPPED_BY_SYSTEM
            for e in harness.events
        )
    )


async def test_destroy_is_stopped_by_system_and_idempotent(harness: Harness) -> None:
    spec = await running(harness)
    await harness.driver.destroy(spec.name)
    info = await state_of(harness.driver, spec.name, DomainState.SHUTOFF)
    assert info.exit_reason is ExitReason.STOPPED_BY_SYSTEM
    await harness.driver.destroy(spec.name)
    assert (await state_of(harness.driver, spec.name, DomainState.SHUTOFF)).name == spec.name


async def test_pause_and_resume(harness: Harness) -> None:
    spec = await running(harness)
    await harness.driver.pause(spec.name)
    await state_of(harness.driver, spec.name, DomainState.PAUSED)
    await harness.driver.pause(spec.name)
    await harness.driver.resume(spec.name)
    await state_of(harness.driver, spec.name, DomainState.RUNNING)
    await harness.driver.resume(spec.name)
    await state_of(harness.driver, spec.name, DomainState.RUNNING)


async def test_a_paused_guest_does_not_hear_a_graceful_shutdown_and_destroy_stops_it(
    harness: Harness,
) -> None:
    """The caller's grace period runs out and it destroys the domain, as for any guest that ignores ACPI."""
    spec = await running(harness, "vm-deaf")
    await harness.driver.pause(spec.name)
    await state_of(harness.driver, spec.name, DomainState.PAUSED)
    await harness.driver.shutdown(spec.name)
    await state_of(harness.driver, spec.name, DomainState.PAUSED)
    await harness.driver.destroy(spec.name)
    info = await state_of(harness.driver, spec.name, DomainState.SHUTOFF)
    assert info.exit_reason is ExitReason.STOPPED_BY_SYSTEM


async def test_undefine_refuses_a_running_domain_and_tolerates_a_missing_one(harness: Harness) -> None:
    spec = await running(harness)
    with pytest.raises(PermanentError):
        await harness.driver.undefine(spec.name)
    await harness.driver.destroy(spec.name)
    await state_of(harness.driver, spec.name, DomainState.SHUTOFF)
    await harness.driver.undefine(spec.name)
    assert await harness.driver.get_info(spec.name) is None
    await harness.driver.undefine(spec.name)


async def test_hostile_vm_names_are_carried_safely(harness: Harness) -> None:
    spec = make_spec("vm-hostile", vm_name="x'\"><evil/>&amp;]]>\n\x01")
    await harness.driver.ensure_defined(spec)
    info = await harness.driver.get_info(spec.name)
    assert info is not None and info.vm_uid == "vm-hostile"


async def test_volumes_create_resize_delete(harness: Harness) -> None:
    d, pool = harness.driver, harness.pool
    vol = await d.create_volume(pool, "data-1", 2)
    assert (vol.name, vol.size_gib) == ("data-1", 2)
    await d.delete_volume(pool, "data-1")
    await d.delete_volume(pool, "data-1")  # gone already: fine
    await d.create_volume(pool, "data-1", 2)
    if Capability.VOLUME_RESIZE in d.capabilities:
        assert (await d.resize_volume(pool, "data-1", 3)).size_gib == 3
    else:
        with pytest.raises(Unsupported):
            await d.resize_volume(pool, "data-1", 3)


async def test_disk_snapshot_revert_and_delete(harness: Harness) -> None:
    d, pool = harness.driver, harness.pool
    vol = await d.create_volume(pool, "root-1", 1)
    handle = await d.snapshot_volume(pool, "root-1", "snap-1")
    assert handle
    assert await d.snapshot_volume(pool, "root-1", "snap-1") == handle  # idempotent
    await d.revert_volume(pool, "root-1", handle)
    spec = make_spec("vm-snap", disks=(DiskAttachment(path=vol.path, boot_order=1),))
    await d.ensure_defined(spec)  # the reverted volume is still usable at its path
    await d.delete_volume_snapshot(handle)
    await d.delete_volume_snapshot(handle)
    with pytest.raises(NotFound):
        await d.revert_volume(pool, "root-1", handle)


async def test_memory_snapshot_keeps_the_domain_running_and_restores(harness: Harness) -> None:
    spec = await running(harness, "vm-mem")
    handle = await harness.driver.save_memory(spec.name, "snap-1")
    await state_of(harness.driver, spec.name, DomainState.RUNNING)
    await harness.driver.destroy(spec.name)
    await state_of(harness.driver, spec.name, DomainState.SHUTOFF)
    await harness.driver.restore_memory(spec, handle)
    await state_of(harness.driver, spec.name, DomainState.RUNNING)
    await harness.driver.delete_volume_snapshot(handle)


async def test_live_migration_works_where_declared_and_is_refused_elsewhere(harness: Harness) -> None:
    spec = await running(harness, "vm-mig")
    request = MigrationRequest(domain=spec.name, target_uri=harness.target.uri)
    if Capability.LIVE_MIGRATION not in harness.driver.capabilities:
        with pytest.raises(Unsupported):
            await harness.driver.migrate(request)
        assert await harness.driver.migration_job(spec.name) is None
        await state_of(harness.driver, spec.name, DomainState.RUNNING)
        return
    await harness.driver.migrate(request)

    async def job() -> MigrationJob | None:
        return await harness.driver.migration_job(spec.name)

    finished = await eventually(job, lambda j: j is not None and j.finished)
    assert finished is not None and finished.phase is MigrationPhase.COMPLETED, finished
    assert finished.target_uri == harness.target.uri
    assert await harness.driver.get_info(spec.name) is None, "gone from the source"
    moved = await state_of(harness.target, spec.name, DomainState.RUNNING)
    assert (moved.vm_uid, moved.cpu, moved.memory_mib) == ("vm-mig", 2, 256)
    await wait_for(
        lambda: any(e.type is DomainEventType.MIGRATED and e.domain == spec.name for e in harness.events)
    )


async def read_until(console: ConsoleStream, text: bytes) -> bytes:
    """What the console sent up to and including ``text``; b"" ends it early (checked by callers)."""
    seen = b""
    while text not in seen:
        data = await asyncio.wait_for(console.read(), 10)
        if not data:
            return seen
        seen += data
    return seen


async def test_the_console_of_a_running_domain_where_declared_and_unsupported_elsewhere(
    harness: Harness,
) -> None:
    spec = await running(harness, "vm-console")
    if Capability.SERIAL_CONSOLE not in harness.driver.capabilities:
        with pytest.raises(Unsupported):
            await harness.driver.open_console(spec.name)
        return
    console = await harness.driver.open_console(spec.name)
    with pytest.raises(ConsoleBusy):
        await harness.driver.open_console(spec.name)
    await console.close()
    await read_until(console, b"\0never")  # what was on its way, then the end
    assert await asyncio.wait_for(console.read(), 10) == b"", "a closed console ends its stream"
    console = await harness.driver.open_console(spec.name)  # free again once closed
    await harness.driver.destroy(spec.name)
    await asyncio.wait_for(read_until(console, b"\0never"), 10)  # returns at the end, not a hang
    assert await asyncio.wait_for(console.read(), 10) == b""
    await console.close()
    with pytest.raises(NotRunning):
        await harness.driver.open_console(spec.name)
    with pytest.raises(NotFound):
        await harness.driver.open_console(domain_name("nobody"))


async def test_a_volume_copied_whole_from_another_volume_a_clone(harness: Harness) -> None:
    """What a VM made from a template gets (Volume spec.source.volume): a copy of a volume of a
    volume pool, checked as a library image is, at its own path."""
    d, pool = harness.driver, harness.pool
    original = await d.create_volume(pool, "tmpl-root", 2)
    copy = await d.create_volume(pool, "clone-root", 1, ImageRef(pool, "tmpl-root", "qcow2"))
    assert copy.name == "clone-root" and copy.path != original.path
    assert copy.size_gib == 2, "at least as large as what it copies"
    assert (
        await d.create_volume(pool, "clone-root", 1, ImageRef(pool, "tmpl-root", "qcow2")) == copy
    )  # a re-run
    with pytest.raises(NotFound):
        await d.create_volume(pool, "clone-2", 1, ImageRef(pool, "no-such-volume", "qcow2"))


async def test_a_volume_copied_from_a_disk_snapshot(harness: Harness) -> None:
    """A VM made from a snapshot gets its disks as the snapshot saved them (Volume
    spec.source.snapshot), whatever the volume holds since."""
    d, pool = harness.driver, harness.pool
    await d.create_volume(pool, "saved-root", 2)
    handle = await d.snapshot_volume(pool, "saved-root", "snap-c")
    copy = await d.copy_volume_snapshot(pool, "from-snap", 1, handle)
    assert copy.name == "from-snap" and copy.size_gib == 2
    assert await d.copy_volume_snapshot(pool, "from-snap", 1, handle) == copy  # a re-run
    await d.delete_volume_snapshot(handle)
    with pytest.raises(NotFound):
        await d.copy_volume_snapshot(pool, "from-gone", 1, handle)


async def test_backups_full_then_incremental_with_checkpoints_where_declared(harness: Harness) -> None:
    """Push-mode backups (issue 36): a full one, a retried begin that starts nothing, an
    incremental that copies less, checkpoints kept across a stop and start and dropped by
    undefine, their definitions taken to another host."""
    d, pool = harness.driver, harness.pool
    root = await d.create_volume(pool, "bk-root", 1)
    spec = await running(harness, "vm-bk", disks=(DiskAttachment(path=root.path),))
    target = PoolRef(name="contract-backups", path="/srv/contract-backups", shared=True)

    def request(checkpoint: str, since: str | None = None) -> BackupRequest:
        base = None if since is None else f"bk-root.{since}"
        disk = DiskBackup(
            disk_path=root.path, volume=f"bk-root.{checkpoint}", size_bytes=GIB, base_volume=base
        )
        return BackupRequest(spec.name, target, checkpoint, (disk,), incremental_from=since)

    if Capability.BACKUP not in d.capabilities:
        with pytest.raises(Unsupported):
            await d.begin_backup(request("cp-1"))
        with pytest.raises(Unsupported):
            await d.checkpoints(spec.name)
        return

    async def ended() -> BackupJob:
        return await eventually(
            lambda: d.backup_job(spec.name), lambda j: j.state is not BackupJobState.RUNNING
        )

    assert (await d.backup_job(spec.name)).state is BackupJobState.UNKNOWN
    await d.begin_backup(request("cp-1"))
    full = await ended()
    assert full.state is BackupJobState.SUCCEEDED and full.processed_bytes == full.total_bytes > 0
    await d.begin_backup(request("cp-1"))  # a retry after a lost answer: nothing new begins
    assert await d.checkpoints(spec.name) == ("cp-1",)
    await d.begin_backup(request("cp-2", since="cp-1"))
    incremental = await ended()
    assert incremental.state is BackupJobState.SUCCEEDED and incremental.total_bytes < full.total_bytes
    await d.destroy(spec.name)
    await d.start(spec.name)
    assert await d.checkpoints(spec.name) == ("cp-1", "cp-2"), "kept across a stop and start"
    definitions = await d.checkpoint_definitions(spec.name)
    await harness.target.ensure_defined(spec)
    await harness.target.redefine_checkpoints(spec.name, definitions)
    assert await harness.target.checkpoints(spec.name) == ("cp-1", "cp-2")
    await d.delete_checkpoint(spec.name, "cp-1")
    await d.delete_checkpoint(spec.name, "cp-1")  # a missing one is no error
    assert await d.checkpoints(spec.name) == ("cp-2",)
    await d.destroy(spec.name)
    await state_of(d, spec.name, DomainState.SHUTOFF)
    await d.undefine(spec.name)
    await d.ensure_defined(spec)
    assert await d.checkpoints(spec.name) == (), "dropped with the domain"
