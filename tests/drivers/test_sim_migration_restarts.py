"""A live migration of the simulator outlives the process that started it, as libvirt's does.

The same set-up as ``test_sim_persistence``: each life runs on a loop of its own that
is closed as it is (pending ticks never fire, nothing is flushed on the way out), and a
new ``SimCloud`` on the same file takes over. The fake ``clock`` says how much wall time
passed while no process ran; each tick of the loop (``TICK_S``) is worth ``TICK_S *
TIME_SCALE`` simulated seconds, so a migration at B MiB/s moves ``B * TICK_S *
TIME_SCALE`` MiB per tick.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from virtplane.drivers.base import (
    DomainEvent,
    DomainEventType,
    DomainSpec,
    DomainState,
    MigrationJob,
    MigrationPhase,
    MigrationRequest,
    domain_name,
)
from virtplane.drivers.errors import TransientError
from virtplane.drivers.sim import FaultKind, SimCloud, SimDriver

from .test_sim_persistence import (
    LOCAL,
    TICK_S,
    TIME_SCALE,
    Clock,
    completed,
    connected,
    domain_state,
    life,
    make_cloud,
    make_spec,
    wait_for_job,
    wait_for_state,
)

RUNNING, PAUSED = domain_name("running"), domain_name("paused")


def mib_per_tick(bandwidth_mib_s: float) -> float:
    return bandwidth_mib_s * TICK_S * TIME_SCALE


def running_job(job: MigrationJob | None) -> MigrationJob:
    assert job is not None and job.phase is MigrationPhase.RUNNING, job
    return job


def moved_past(seen: MigrationJob) -> Callable[[MigrationJob], bool]:
    """A job that has ticked since ``seen``."""
    return lambda job: job.data_processed_mib > seen.data_processed_mib


async def source_and_target(
    cloud: SimCloud, target_vcpus: int = 8, target_memory_mib: int = 8192
) -> SimDriver:
    """Hosts ``src`` and ``dst``; returns the connection to ``src``."""
    cloud.add_host("src", vcpus=8, memory_mib=8192)
    cloud.add_host("dst", vcpus=target_vcpus, memory_mib=target_memory_mib)
    return await connected(cloud, "src")


async def boot(driver: SimDriver, spec: DomainSpec) -> None:
    await driver.ensure_defined(spec)
    await driver.start(spec.name)
    await wait_for_state(driver, spec.name, DomainState.RUNNING)


def test_a_migration_in_flight_goes_on_in_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    clock = Clock()
    bandwidth = 50  # 10 MiB a tick: about a hundred ticks for 1 GiB

    async def first_life() -> float:
        """``running`` and ``paused`` (1 GiB each) on their way from src to dst."""
        cloud = make_cloud(path, clock)
        src = await source_and_target(cloud)
        for uid in ("running", "paused"):
            await boot(src, make_spec(uid, memory_mib=1024))
        await src.pause(PAUSED)
        cloud.set_dirty_rate(RUNNING, 10.0)  # a second pass, then it converges
        for name in (RUNNING, PAUSED):
            await src.migrate(
                MigrationRequest(domain=name, target_uri="sim://dst", bandwidth_mib_s=bandwidth)
            )
        await wait_for_job(src, RUNNING, lambda job: job.data_processed_mib >= 100)
        # wall time passes while this process runs too: each tick stores when it happened,
        # so the next process does not count this second again. Both migrations must tick
        # after the jump: one whose last tick is stamped before it would be owed the whole
        # second (500 ticks) by the next process, as if no process had run meanwhile.
        clock.now += 1.0
        for name in (RUNNING, PAUSED):
            await wait_for_job(src, name, moved_past(running_job(await src.migration_job(name))))
        return running_job(await src.migration_job(RUNNING)).data_processed_mib

    async def progress(cloud: SimCloud) -> dict[str, float]:
        src = await connected(cloud, "src")  # resumes the migrations; no tick runs before the reads
        return {
            name: running_job(await src.migration_job(name)).data_processed_mib for name in (RUNNING, PAUSED)
        }

    last_seen = life(first_life)
    cloud = make_cloud(path, clock)
    assert cloud.snapshot_state().hosts["src"].domains == {
        RUNNING: DomainState.MIGRATING,
        PAUSED: DomainState.MIGRATING,
    }
    assert cloud.active_hosts(RUNNING) == ["src"]
    at_the_kill = life(lambda: progress(cloud))
    # as far as the last tick of the first life (which may have run after the test's last look)
    assert last_seen <= at_the_kill[RUNNING] <= last_seen + mib_per_tick(bandwidth)
    del cloud

    clock.now += 20.5 * TICK_S  # twenty ticks pass while no process runs
    cloud = make_cloud(path, clock)
    events: list[DomainEvent] = []

    async def second_life() -> None:
        after_the_gap = await progress(cloud)
        for name in (RUNNING, PAUSED):
            assert after_the_gap[name] == pytest.approx(at_the_kill[name] + 20 * mib_per_tick(bandwidth))
        src, dst = await connected(cloud, "src"), await connected(cloud, "dst")
        src.set_event_sink(events.append)
        dst.set_event_sink(events.append)
        # the job is the source's, and the target sees it too, as before the restart
        assert running_job(await dst.migration_job(RUNNING)).target_uri == "sim://dst"
        # it goes on with its timer in this process and ends with the domains on the target
        await wait_for_job(src, RUNNING, lambda job: job.data_processed_mib > after_the_gap[RUNNING])
        # the dirty rate still counts: the running guest needs a second pass, the paused one does not
        for name, passes in ((RUNNING, 2), (PAUSED, 1)):
            job = await wait_for_job(src, name, completed)
            assert (job.iteration, job.data_remaining_mib) == (passes, 0)
        assert await src.get_info(RUNNING) is None and await src.get_info(PAUSED) is None
        assert (await wait_for_state(dst, RUNNING, DomainState.RUNNING)).memory_mib == 1024
        await wait_for_state(dst, PAUSED, DomainState.PAUSED)  # paused it was, paused it stays

    life(second_life)
    assert {(e.host_uri, e.domain, e.type) for e in events} == {
        (uri, name, kind)
        for name in (RUNNING, PAUSED)
        for uri, kind in (("sim://src", DomainEventType.MIGRATED), ("sim://dst", DomainEventType.DEFINED))
    } | {("sim://dst", name, DomainEventType.STARTED) for name in (RUNNING, PAUSED)}
    state = make_cloud(path, clock).snapshot_state()
    assert state.hosts["src"].domains == {} and state.hosts["src"].used_memory_mib == 0
    assert state.hosts["dst"].domains == {RUNNING: DomainState.RUNNING, PAUSED: DomainState.PAUSED}


def test_a_block_migration_that_ended_while_no_process_ran_is_complete_on_load(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    clock = Clock()
    name = domain_name("vm")
    disk = "sim://local/disk"

    async def first_life() -> str:
        cloud = make_cloud(path, clock)
        cloud.add_host("h1", vcpus=8, memory_mib=8192)
        cloud.add_host("h2", vcpus=8, memory_mib=8192)
        h1, h2 = await connected(cloud, "h1"), await connected(cloud, "h2")
        await h1.ensure_pool(LOCAL)
        await h2.ensure_pool(LOCAL)
        await h1.create_volume(LOCAL, "disk", 1)
        await boot(h1, make_spec("vm", memory_mib=512, disks=(disk,)))
        cloud.write_memory(name, "guest memory")
        # 1 GiB of disk and 512 MiB of memory at 10 MiB/s: about 150 simulated seconds
        await h1.migrate(
            MigrationRequest(domain=name, target_uri="sim://h2", copy_disks=(disk,), bandwidth_mib_s=10)
        )
        cloud.write_volume(disk, "written during the copy", host="h1")  # mirrored to the target
        job = await wait_for_job(h1, name, lambda job: job.data_processed_mib > 0)
        assert job.data_processed_mib < 1024  # still copying the disk
        return cloud.read_memory(name)

    memory = life(first_life)
    clock.now += 200 / TIME_SCALE  # 200 simulated seconds: more than it needs
    cloud = make_cloud(path, clock)  # no loop runs: it all happens on load
    state = cloud.snapshot_state()
    assert state.hosts["h1"].domains == {} and state.hosts["h1"].used_memory_mib == 0
    assert state.hosts["h2"].domains == {name: DomainState.RUNNING}
    assert state.hosts["h2"].used_memory_mib == 512
    assert cloud.read_memory(name) == memory == "guest memory"
    assert cloud.read_volume(disk, host="h2") == "written during the copy"
    assert cloud.read_volume(disk, host="h1") == "written during the copy"  # the source keeps its copy

    async def looks_like_libvirt_after_a_migration(cloud: SimCloud) -> None:
        h1, h2 = await connected(cloud, "h1"), await connected(cloud, "h2")
        assert await h1.get_info(name) is None
        assert (await h2.get_info(name)) is not None
        # no job is left: as with libvirt, none is queryable once the source domain is gone
        assert await h1.migration_job(name) is None
        assert await h2.migration_job(name) is None
        # the target holds no room for the migration any more: all its memory but the guest's is free
        await h2.ensure_defined(make_spec("filler", memory_mib=8192 - 512))
        await h2.start(domain_name("filler"))
        await h2.destroy(domain_name("filler"))

    life(lambda: looks_like_libvirt_after_a_migration(cloud))
    del cloud
    # what the load decided was written
    cloud = make_cloud(path, clock)
    assert cloud.snapshot_state().hosts["h2"].domains == {
        name: DomainState.RUNNING,
        domain_name("filler"): DomainState.SHUTOFF,
    }
    life(lambda: looks_like_libvirt_after_a_migration(cloud))


def test_injected_faults_strike_while_no_process_runs(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    clock = Clock()
    failing, stalling = domain_name("failing"), domain_name("stalling")

    async def first_life() -> None:
        cloud = make_cloud(path, clock)
        src = await source_and_target(cloud, target_vcpus=2, target_memory_mib=2048)
        for uid in ("failing", "stalling"):
            await boot(src, make_spec(uid, memory_mib=1024))
        cloud.inject("src", FaultKind.FAIL_MIGRATION, failing)
        cloud.inject("src", FaultKind.STALL_MIGRATION, stalling)
        for name in (failing, stalling):
            await src.migrate(MigrationRequest(domain=name, target_uri="sim://dst", bandwidth_mib_s=10))
            await wait_for_job(src, name, lambda job: 0 < job.data_processed_mib < 512)

    life(first_life)
    clock.now += 100 / TIME_SCALE  # 1000 MiB at 10 MiB/s: past the fault point, half way
    cloud = make_cloud(path, clock)
    assert domain_state(cloud, "src", "failing") == (DomainState.RUNNING, None)
    assert domain_state(cloud, "src", "stalling") == (DomainState.MIGRATING, None)
    assert cloud.snapshot_state().hosts["dst"].domains == {}
    assert cloud.armed_faults("src")[FaultKind.FAIL_MIGRATION] == {}
    assert cloud.armed_faults("src")[FaultKind.STALL_MIGRATION] == {}
    events: list[DomainEvent] = []

    async def second_life() -> tuple[MigrationJob, MigrationJob]:
        src = await connected(cloud, "src")
        src.set_event_sink(events.append)
        failed = await src.migration_job(failing)
        assert failed is not None and failed.phase is MigrationPhase.FAILED and "injected" in failed.error
        assert failed.data_processed_mib == pytest.approx(512)
        assert running_job(await src.migration_job(stalling)).data_processed_mib == pytest.approx(512)
        await src.abort_migration(stalling)
        aborted = await src.migration_job(stalling)
        assert aborted is not None and aborted.phase is MigrationPhase.ABORTED
        for name in (failing, stalling):  # both still run on the source
            info = await src.get_info(name)
            assert info is not None and (info.state, info.exit_reason) == (DomainState.RUNNING, None)
        return failed, aborted

    failed_before, aborted_before = life(second_life)
    # nothing was sent for the failure nobody saw; the abort in this life sent its own
    assert [(e.domain, e.type) for e in events] == [(stalling, DomainEventType.MIGRATION_FAILED)]
    # the failed and aborted jobs stay queryable in the next process too, until their next migration
    cloud = make_cloud(path, clock)

    async def third_life() -> None:
        src = await connected(cloud, "src")
        assert await src.migration_job(failing) == failed_before
        assert await src.migration_job(stalling) == aborted_before
        for name in (failing, stalling):  # the target holds nothing: both fit, one after the other
            await src.migrate(MigrationRequest(domain=name, target_uri="sim://dst"))
            await wait_for_job(src, name, completed)
        assert cloud.active_hosts(failing) == cloud.active_hosts(stalling) == ["dst"]

    life(third_life)


def test_an_injected_fail_strikes_in_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    clock = Clock()
    name = domain_name("vm")

    async def first_life() -> None:
        cloud = make_cloud(path, clock)
        src = await source_and_target(cloud)
        await boot(src, make_spec("vm", memory_mib=1024))
        cloud.inject("src", FaultKind.FAIL_MIGRATION, name)
        await src.migrate(MigrationRequest(domain=name, target_uri="sim://dst", bandwidth_mib_s=50))
        await wait_for_job(src, name, lambda job: job.data_processed_mib > 0)

    life(first_life)  # no time passes on the fake clock: the fault point is still ahead
    cloud = make_cloud(path, clock)
    assert domain_state(cloud, "src", "vm") == (DomainState.MIGRATING, None)
    events: list[DomainEvent] = []

    async def second_life() -> None:
        src = cloud.driver("sim://src")
        src.set_event_sink(events.append)
        await src.connect()
        job = await wait_for_job(src, name, lambda job: job.finished)
        assert (job.phase, job.data_processed_mib) == (MigrationPhase.FAILED, pytest.approx(512))
        assert (await wait_for_state(src, name, DomainState.RUNNING)).exit_reason is None

    life(second_life)
    assert [(e.domain, e.type) for e in events] == [(name, DomainEventType.MIGRATION_FAILED)]
    assert make_cloud(path, clock).active_hosts(name) == ["src"]


def test_an_incoming_migration_keeps_its_room_on_the_target_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    big, small = domain_name("big"), domain_name("small")

    async def first_life() -> None:
        cloud = make_cloud(path)
        src = await source_and_target(cloud, target_memory_mib=1024)
        dst = await connected(cloud, "dst")
        for spec in (make_spec("big", cpu=2, memory_mib=1024), make_spec("small")):
            await boot(src, spec)
        await dst.ensure_defined(make_spec("local", cpu=1))
        # 1 MiB/s: it will not end during the test
        await src.migrate(MigrationRequest(domain=big, target_uri="sim://dst", bandwidth_mib_s=1))
        await wait_for_job(src, big, lambda job: job.data_processed_mib > 0)

    life(first_life)
    cloud = make_cloud(path)

    async def second_life() -> None:
        src, dst = await connected(cloud, "src"), await connected(cloud, "dst")
        running_job(await src.migration_job(big))
        # all the memory of dst is promised to the migration in flight (a host refuses by memory)
        await src.migrate(MigrationRequest(domain=small, target_uri="sim://dst"))
        refused = await src.migration_job(small)
        assert refused is not None and refused.phase is MigrationPhase.FAILED and "full" in refused.error
        with pytest.raises(TransientError, match="full"):
            await dst.start(domain_name("local"))
        # abort after the restart: the domain stays on the source and the room is free again
        await src.abort_migration(big)
        aborted = await src.migration_job(big)
        assert aborted is not None and aborted.phase is MigrationPhase.ABORTED
        assert (await wait_for_state(src, big, DomainState.RUNNING)).cpu == 2
        assert await dst.get_info(big) is None
        await src.migrate(MigrationRequest(domain=small, target_uri="sim://dst"))
        await wait_for_job(src, small, completed)
        await dst.start(domain_name("local"))

    life(second_life)
    state = make_cloud(path).snapshot_state()
    assert state.hosts["src"].domains == {big: DomainState.RUNNING}
    assert state.hosts["dst"].used_vcpus == 2


async def start_a_slow_migration(path: Path, *, paused: bool = False) -> None:
    """``vm`` (1 GiB) on its way from src to dst at 1 MiB/s: far from done when the life ends."""
    cloud = make_cloud(path)
    src = await source_and_target(cloud)
    await boot(src, make_spec("vm", memory_mib=1024))
    if paused:
        await src.pause(domain_name("vm"))
    await src.migrate(MigrationRequest(domain=domain_name("vm"), target_uri="sim://dst", bandwidth_mib_s=1))
    await wait_for_job(src, domain_name("vm"), lambda job: job.data_processed_mib > 0)


def test_a_migration_whose_target_is_down_at_load_fails(tmp_path: Path) -> None:
    """A host goes down only through ``host-down``, which fails its migrations at once; a file
    that says otherwise (written by hand, or by another tool) gets the same rule on load."""
    path = tmp_path / "sim.db"
    name = domain_name("vm")
    life(lambda: start_a_slow_migration(path))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE hosts SET up = 0 WHERE name = 'dst'")
    cloud = make_cloud(path)
    assert domain_state(cloud, "src", "vm") == (DomainState.RUNNING, None)

    async def second_life() -> None:
        src = await connected(cloud, "src")
        job = await src.migration_job(name)
        assert job is not None and job.phase is MigrationPhase.FAILED
        assert job.error == "host went down: sim://dst"

    life(second_life)


def test_a_file_from_before_migrations_were_stored_is_upgraded(tmp_path: Path) -> None:
    """Schema 1 had no migrations table: its migrations in flight are gone, their domains stay."""
    path = tmp_path / "sim.db"
    life(lambda: start_a_slow_migration(path, paused=True))
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE migrations")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
    cloud = make_cloud(path)
    assert domain_state(cloud, "src", "vm") == (DomainState.PAUSED, None)
    cloud.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (
            "5",
        )  # upgraded to the current version
        assert conn.execute("SELECT count(*) FROM migrations").fetchone() == (0,)
    assert domain_state(make_cloud(path), "src", "vm") == (DomainState.PAUSED, None)
