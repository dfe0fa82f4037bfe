"""The simulator's dirtying guest under the migration policy's tools: auto-converge,
post-copy, maximum downtime; the arithmetic first, then through the driver."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from virtplane.domain.phases import DomainState
from virtplane.drivers.base import MigrationPhase, MigrationRequest, domain_name
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.sim import FaultKind, SimCloud, SimDriver
from virtplane.drivers.sim._precopy import Migration

from .test_sim import TICK_S, cloud, h1, h2, make_spec, running, wait_for_job
from .test_sim_migration_restarts import boot, source_and_target
from .test_sim_persistence import connected, life, make_cloud
from .test_sim_persistence import make_spec as persisted_spec
from .test_sim_persistence import wait_for_job as wait_for_persisted_job

__all__ = ["cloud", "h1", "h2"]  # fixtures

LINK_MIB_S = 1000.0


def migration(memory_mib: int = 1024, **policy: bool | int | None) -> Migration:
    world = SimCloud()
    world.add_host("a", vcpus=1, memory_mib=1024)
    world.add_host("b", vcpus=1, memory_mib=1024)
    source, target = world.host_by_uri("sim://a"), world.host_by_uri("sim://b")
    assert source is not None and target is not None
    return Migration(
        domain="d",
        vm_uid="u",
        source=source,
        target=target,
        bandwidth_mib_s=LINK_MIB_S,
        memory_mib=float(memory_mib),
        disks=(),
        fault=None,
        **policy,  # type: ignore[arg-type]
    )


def seconds_to_converge(m: Migration, dirty_rate: float, limit_s: int = 600) -> int | None:
    for second in range(1, limit_s + 1):
        if m.advance(1.0, dirty_rate):
            return second
    return None


def test_a_guest_dirtying_faster_than_the_link_never_converges_without_the_policy() -> None:
    m = migration()
    assert seconds_to_converge(m, 1500) is None
    job = m.job()
    assert job.phase is MigrationPhase.RUNNING and job.iteration > 100
    assert job.dirty_rate_mib_s == 1500 and job.throttle_pct == 0
    assert job.memory_remaining_mib > 0 and not job.post_copy


def test_auto_converge_throttles_the_guest_until_pre_copy_converges() -> None:
    m = migration(auto_converge=True)
    seen: list[int] = []
    for _ in range(600):
        if m.advance(1.0, 1500):
            break
        seen.append(m.job().throttle_pct)
    else:
        pytest.fail("auto-converge never converged")
    # 20 %, then 10 % more a pass: converged once the throttled rate fell well below the link
    assert seen[0] == 0 and seen[-1] >= 40
    assert seen == sorted(seen)
    last = m.job()
    assert last.throttle_pct >= seen[-1]
    assert last.dirty_rate_mib_s == pytest.approx(1500 * (1 - last.throttle_pct / 100))


def test_post_copy_sends_what_is_left_once_and_finishes() -> None:
    m = migration(post_copy_allowed=True)
    for _ in range(5):
        assert not m.advance(1.0, 1500)
    m.switch_to_post_copy()
    job = m.job()
    assert job.post_copy and job.dirty_rate_mib_s == 0
    # at most all of memory is left, and nothing is dirtied here any more: one pass at link speed
    assert seconds_to_converge(m, 1500, limit_s=2) is not None


def test_max_downtime_lets_a_busy_guest_switch_over_with_more_left() -> None:
    assert seconds_to_converge(migration(), 1200, limit_s=60) is None
    # 2 s of downtime at 1000 MiB/s may leave 2000 MiB for the paused copy: more than all memory
    assert seconds_to_converge(migration(max_downtime_ms=2000), 1200, limit_s=60) == 2


# --------------------------------------------------------------------------- through the driver


async def in_pre_copy(driver: SimDriver, name: str, passes: int = 3) -> None:
    while (job := await driver.migration_job(name)) is not None and job.iteration < passes:
        assert not job.finished
        await asyncio.sleep(TICK_S)


async def test_the_job_shows_dirty_rate_remaining_memory_and_pass(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    spec = make_spec(memory_mib=1024)
    await running(h1, spec)
    cloud.set_dirty_rate(spec.name, 1500)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri, auto_converge=True))
    await in_pre_copy(h1, spec.name)
    job = await h1.migration_job(spec.name)
    assert job is not None and job.iteration >= 3
    assert 0 < job.dirty_rate_mib_s <= 1500 and 0 < job.memory_remaining_mib <= 1024
    assert job.throttle_pct >= 20
    done = await wait_for_job(h1, spec.name)
    assert done.phase is MigrationPhase.COMPLETED


async def test_post_copy_is_asked_for_explicitly_and_cannot_be_aborted(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    cloud.set_dirty_rate(spec.name, 1500)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri, bandwidth_mib_s=10))
    with pytest.raises(PermanentError, match="not started with post-copy"):
        await h1.start_post_copy(spec.name)
    await h1.abort_migration(spec.name)
    await wait_for_job(h1, spec.name)
    await h1.migrate(
        MigrationRequest(domain=spec.name, target_uri=h2.uri, bandwidth_mib_s=10, post_copy=True)
    )
    await h1.start_post_copy(spec.name)
    await h1.start_post_copy(spec.name)  # idempotent
    with pytest.raises(PermanentError, match="post-copy"):
        await h1.abort_migration(spec.name)
    job = await h1.migration_job(spec.name)
    assert job is not None and job.post_copy and job.phase is MigrationPhase.RUNNING


async def test_a_host_failure_during_post_copy_loses_the_guest(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    await h1.migrate(
        MigrationRequest(domain=spec.name, target_uri=h2.uri, bandwidth_mib_s=10, post_copy=True)
    )
    await h1.start_post_copy(spec.name)
    cloud.inject("h2", FaultKind.HOST_DOWN)
    job = await h1.migration_job(spec.name)
    assert job is not None and job.phase is MigrationPhase.FAILED and "the guest is lost" in job.error
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is not DomainState.RUNNING
    assert cloud.active_hosts(spec.name) == []


# --------------------------------------------------------------------------- the state file


def test_a_migration_in_post_copy_goes_on_in_the_next_process(tmp_path: Path) -> None:
    """The policy and the switch are stored with the job: the next process finishes it in
    post-copy (no dirtying, no abort), as the hypervisors would."""
    path = tmp_path / "sim.db"
    name = domain_name("vm")

    async def first_life() -> None:
        cloud = make_cloud(path)
        src = await source_and_target(cloud)
        await boot(src, persisted_spec("vm", memory_mib=1024))
        cloud.set_dirty_rate(name, 5000)
        request = MigrationRequest(
            domain=name, target_uri="sim://dst", bandwidth_mib_s=1, post_copy=True, auto_converge=True
        )
        await src.migrate(request)
        await wait_for_persisted_job(src, name, lambda job: job.data_processed_mib > 0)
        await src.start_post_copy(name)

    async def second_life() -> None:
        cloud = make_cloud(path)
        src = await connected(cloud, "src")
        job = await src.migration_job(name)
        assert job is not None and job.post_copy and job.phase is MigrationPhase.RUNNING
        with pytest.raises(PermanentError, match="post-copy"):
            await src.abort_migration(name)

    life(first_life)
    life(second_life)


def test_a_state_file_of_schema_3_gets_the_policy_column(tmp_path: Path) -> None:
    """A migration stored before the policy was goes on with none: plain pre-copy."""
    path = tmp_path / "sim.db"
    name = domain_name("vm")

    async def first_life() -> None:
        cloud = make_cloud(path)
        src = await source_and_target(cloud)
        await boot(src, persisted_spec("vm", memory_mib=1024))
        await src.migrate(MigrationRequest(domain=name, target_uri="sim://dst", bandwidth_mib_s=1))
        await wait_for_persisted_job(src, name, lambda job: job.data_processed_mib > 0)

    life(first_life)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE migrations DROP COLUMN policy")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema'")
    cloud = make_cloud(path)
    migration = cloud.migrations.latest(name)
    assert migration is not None and migration.phase is MigrationPhase.RUNNING
    assert (migration.auto_converge, migration.post_copy_allowed, migration.post_copy) == (
        False,
        False,
        False,
    )
    cloud.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("5",)
