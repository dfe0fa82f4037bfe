"""Real QEMU guests (TCG) on two real libvirt daemons: what libvirt's test driver cannot show.

Guests are tiny (busybox initramfs, 192 MiB) and they print on their serial
console, which the tests read: GUEST-UP when booted, DISK0 with the first bytes
of their disk, TICK n every 2 s.
"""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import (
    DiskAttachment,
    DomainEvent,
    DomainEventType,
    DomainInfo,
    DomainState,
    ImageRef,
    MigrationJob,
    MigrationPhase,
    MigrationRequest,
)

from .conftest import Rig, console_shows, eventually, guest_spec, wait_for

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


async def state_is(driver: Any, name: str, state: DomainState, limit_s: float = 60.0) -> DomainInfo:
    async def probe() -> DomainInfo | None:
        info: DomainInfo | None = await driver.get_info(name)
        return info

    info = await eventually(probe, lambda i: i is not None and i.state is state, limit_s)
    assert info is not None
    return info


async def finished_job(driver: Any, name: str) -> MigrationJob:
    async def probe() -> MigrationJob | None:
        job: MigrationJob | None = await driver.migration_job(name)
        return job

    job = await eventually(probe, lambda j: j is not None and j.finished, 120.0)
    assert job is not None
    return job


def fill_disk(path: str, byte: int) -> None:
    """Write a marker over the first sector of a stopped guest's qcow2 disk."""
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", f"write -P {byte:#x} 0 512", path], check=True, capture_output=True
    )


async def test_boot_graceful_shutdown_and_destroy(rig: Rig, drivers: dict[str, Any]) -> None:
    a = drivers["a"]
    events: list[DomainEvent] = []
    a.set_event_sink(events.append)
    spec = guest_spec(rig, "life")
    await a.ensure_defined(spec)
    await a.start(spec.name)
    await console_shows(rig, spec.name, "GUEST-UP")
    assert (await state_is(a, spec.name, DomainState.RUNNING)).memory_mib == 192

    await a.shutdown(spec.name)  # ACPI power button -> busybox acpid -> poweroff
    info = await state_is(a, spec.name, DomainState.SHUTOFF)
    assert info.exit_reason is ExitReason.STOPPED_BY_SYSTEM
    await wait_for(lambda: any(e.type is DomainEventType.STOPPED for e in events))
    assert [e.reason for e in events if e.type is DomainEventType.STOPPED] == [ExitReason.STOPPED_BY_SYSTEM]

    await a.start(spec.name)
    await console_shows(rig, spec.name, "GUEST-UP", count=2)
    await a.destroy(spec.name)
    assert (await state_is(a, spec.name, DomainState.SHUTOFF)).exit_reason is ExitReason.STOPPED_BY_SYSTEM


async def test_guest_reset_and_guest_power_off_are_their_own_events(
    rig: Rig, drivers: dict[str, Any]
) -> None:
    a = drivers["a"]
    events: list[DomainEvent] = []
    a.set_event_sink(events.append)
    resetting = guest_spec(rig, "resetting", cmdline="vp.reboot=1")
    leaving = guest_spec(rig, "leaving", cmdline="vp.poweroff=1")
    for spec in (resetting, leaving):
        await a.ensure_defined(spec)
        await a.start(spec.name)

    await console_shows(rig, resetting.name, "GUEST-UP", count=2)  # it came back up after resetting
    assert (await a.get_info(resetting.name)).state is DomainState.RUNNING
    await wait_for(
        lambda: any(e.type is DomainEventType.RESET and e.domain == resetting.name for e in events)
    )
    reset = next(e for e in events if e.type is DomainEventType.RESET)
    assert (reset.reason, reset.vm_uid) == (ExitReason.GUEST_RESET, "resetting")

    info = await state_is(a, leaving.name, DomainState.SHUTOFF)
    assert info.exit_reason is ExitReason.GUEST_SHUTDOWN
    await wait_for(
        lambda: any(e.type is DomainEventType.STOPPED and e.domain == leaving.name for e in events)
    )
    stopped = [e for e in events if e.type is DomainEventType.STOPPED and e.domain == leaving.name]
    assert [e.reason for e in stopped] == [ExitReason.GUEST_SHUTDOWN]
    assert not [e for e in events if e.type is DomainEventType.STOPPED and e.domain == resetting.name]


async def test_disk_snapshot_of_a_running_guest_and_revert(rig: Rig, drivers: dict[str, Any]) -> None:
    a = drivers["a"]
    vol = await a.create_volume(rig.shared_pool, "snap-root.qcow2", 1)
    fill_disk(vol.path, ord("A"))
    spec = guest_spec(rig, "snap", (DiskAttachment(path=vol.path, boot_order=1, shared=True),))
    await a.ensure_defined(spec)
    await a.start(spec.name)
    await console_shows(rig, spec.name, "DISK0: AAAAAAAAAAAAAAAA")

    handle = await a.snapshot_volume(rig.shared_pool, "snap-root.qcow2", "s1")  # live: a backup job
    assert (await a.get_info(spec.name)).state is DomainState.RUNNING
    await a.destroy(spec.name)
    fill_disk(vol.path, ord("B"))
    await a.start(spec.name)
    await console_shows(rig, spec.name, "DISK0: BBBBBBBBBBBBBBBB")
    await a.destroy(spec.name)

    await a.revert_volume(rig.shared_pool, "snap-root.qcow2", handle)
    await a.start(spec.name)
    await console_shows(rig, spec.name, "DISK0: AAAAAAAAAAAAAAAA", count=2)
    await a.destroy(spec.name)
    await a.delete_volume_snapshot(handle)
    await a.delete_volume(rig.shared_pool, "snap-root.qcow2")


async def test_memory_snapshot_resumes_where_it_was(rig: Rig, drivers: dict[str, Any]) -> None:
    a = drivers["a"]
    spec = guest_spec(rig, "memsnap")
    await a.ensure_defined(spec)
    await a.start(spec.name)
    await console_shows(rig, spec.name, "TICK 2")
    handle = await a.save_memory(spec.name, "m1")
    assert (await state_is(a, spec.name, DomainState.RUNNING)).exit_reason is None
    await a.destroy(spec.name)
    await a.restore_memory(spec, handle)
    await state_is(a, spec.name, DomainState.RUNNING)
    log = await console_shows(rig, spec.name, "TICK 4")
    assert log.count("GUEST-UP") == 1  # it resumed from memory; it did not boot again
    await a.delete_volume_snapshot(handle)


async def migrate_and_check(
    rig: Rig, drivers: dict[str, Any], uid: str, pool_name: str, *, copy: bool
) -> None:
    a, b = drivers["a"], drivers["b"]
    pool = rig.shared_pool if pool_name == "shared" else rig.local_pool
    # An image marked in the library (which this process sees), copied by libvirt where it belongs.
    image = await a.create_volume(rig.library_pool, f"{uid}-image.qcow2", 1)
    fill_disk(image.path, ord("M"))
    source = ImageRef(rig.library_pool, f"{uid}-image.qcow2", "qcow2")
    vol = await a.create_volume(pool, f"{uid}.qcow2", 1, source)
    spec = guest_spec(rig, uid, (DiskAttachment(path=vol.path, boot_order=1, shared=not copy),))
    events: list[DomainEvent] = []
    a.set_event_sink(events.append)
    await a.ensure_defined(spec)
    await a.start(spec.name)
    await console_shows(rig, spec.name, "DISK0: MMMMMMMMMMMMMMMM")

    request = MigrationRequest(
        domain=spec.name, target_uri=rig.hosts["b"].uri, copy_disks=(vol.path,) if copy else (), spec=spec
    )
    await a.migrate(request)
    job = await finished_job(a, spec.name)
    assert job.phase is MigrationPhase.COMPLETED, job.error
    assert await a.get_info(spec.name) is None  # undefined on the source
    await state_is(b, spec.name, DomainState.RUNNING)
    await wait_for(lambda: any(e.type is DomainEventType.MIGRATED for e in events))
    ticks = rig.console(spec.name).count("TICK")
    await console_shows(rig, spec.name, "TICK", count=ticks + 1)  # still alive over there
    # The destination boots from its own disk (a copy, or the shared file) with the marker on it.
    await b.destroy(spec.name)
    await b.start(spec.name)
    await console_shows(rig, spec.name, "DISK0: MMMMMMMMMMMMMMMM", count=2)
    await b.destroy(spec.name)
    await b.undefine(spec.name)
    await b.delete_volume(pool, f"{uid}.qcow2")
    await a.delete_volume(pool, f"{uid}.qcow2")
    await a.delete_volume(rig.library_pool, f"{uid}-image.qcow2")


async def test_live_migration_with_shared_storage(rig: Rig, drivers: dict[str, Any]) -> None:
    await migrate_and_check(rig, drivers, "mig-shared", "shared", copy=False)


async def test_live_migration_copying_local_disks(rig: Rig, drivers: dict[str, Any]) -> None:
    await migrate_and_check(rig, drivers, "mig-local", "local", copy=True)


async def test_migration_aborted_half_way_leaves_the_guest_running_at_the_source(
    rig: Rig, drivers: dict[str, Any]
) -> None:
    a, b = drivers["a"], drivers["b"]
    spec = guest_spec(rig, "mig-abort", memory_mib=256, cmdline="vp.dirty=64")
    await a.ensure_defined(spec)
    await a.start(spec.name)
    await console_shows(rig, spec.name, "TICK 1")
    await a.migrate(MigrationRequest(domain=spec.name, target_uri=rig.hosts["b"].uri, bandwidth_mib_s=2))

    async def progress() -> MigrationJob | None:
        job: MigrationJob | None = await a.migration_job(spec.name)
        return job

    running = await eventually(progress, lambda j: j is not None and j.data_processed_mib > 0, 60.0)
    assert running is not None and running.phase is MigrationPhase.RUNNING and running.data_total_mib > 0
    assert (await a.get_info(spec.name)).state is DomainState.MIGRATING
    # The bandwidth limit is in force on the running job.
    assert a._connection.get().lookupByName(spec.name).migrateGetMaxSpeed(0) == 2

    await a.abort_migration(spec.name)
    job = await finished_job(a, spec.name)
    assert job.phase is MigrationPhase.ABORTED
    assert (await state_is(a, spec.name, DomainState.RUNNING)).exit_reason is None
    assert await b.get_info(spec.name) is None
    ticks = rig.console(spec.name).count("TICK")
    await console_shows(rig, spec.name, "TICK", count=ticks + 1)


async def test_host_goes_away_and_comes_back(rig: Rig, drivers: dict[str, Any]) -> None:
    b = drivers["b"]
    events: list[DomainEvent] = []
    b.set_event_sink(events.append)
    rig.stop_host("b")
    await wait_for(lambda: not b.connected, 30.0)
    assert [e.type for e in events] == [DomainEventType.HOST_DOWN]
    rig.hosts["b"] = rig.start_host("b")
    await wait_for(lambda: b.connected, 30.0)
    assert [e.type for e in events] == [DomainEventType.HOST_DOWN, DomainEventType.HOST_UP]
    assert isinstance(await b.list_domains(), list)
    await asyncio.sleep(0)
