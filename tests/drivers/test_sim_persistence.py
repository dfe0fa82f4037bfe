"""The simulated hypervisor with a state file survives the death of its process.

Each test drives a world on an event loop of its own and then closes that loop
without any clean shutdown: timers still pending never fire and nothing is
flushed on the way out, as after a SIGKILL (one test really kills a subprocess
with SIGKILL). A new ``SimCloud`` on the same file must then see the world as the
contract in the package docstring's "Restarts" says. Time that passed while no process ran
is simulated with a fake ``clock``; the loop's own delays are a few milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import (
    DiskAttachment,
    DomainEvent,
    DomainEventType,
    DomainInfo,
    DomainSpec,
    DomainState,
    ImageRef,
    MigrationJob,
    MigrationPhase,
    MigrationRequest,
    NicAttachment,
    PoolRef,
    domain_name,
)
from virtplane.drivers.errors import HostUnreachable, TransientError
from virtplane.drivers.sim import FaultKind, SimCloud, SimDriver

BOOT_S = 0.02
SHUTDOWN_S = 0.02
TICK_S = 0.002
TIME_SCALE = 100.0

T = TypeVar("T")

SHARED = PoolRef(name="shared", path="shared", shared=True, capacity_gib=100)
LOCAL = PoolRef(name="local", path="local", capacity_gib=50)


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_cloud(path: Path, clock: Clock | None = None, **kwargs: Any) -> SimCloud:
    options: dict[str, Any] = {
        "boot_seconds": BOOT_S,
        "shutdown_seconds": SHUTDOWN_S,
        "time_scale": TIME_SCALE,
        "migration_tick_s": TICK_S,
    }
    options.update(kwargs)
    return SimCloud(state_path=path, clock=clock or Clock(), **options)


def life(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main`` on a fresh loop, then close the loop as it is: pending timers never fire."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def make_spec(uid: str, cpu: int = 1, memory_mib: int = 512, disks: tuple[str, ...] = ()) -> DomainSpec:
    return DomainSpec(
        name=domain_name(uid),
        vm_name=f"name-{uid}",
        vm_uid=uid,
        cpu=cpu,
        memory_mib=memory_mib,
        disks=tuple(DiskAttachment(path=p, boot_order=i + 1) for i, p in enumerate(disks)),
    )


async def wait_until(condition: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0  # only guards against a hang
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition never became true")
        await asyncio.sleep(0.001)


async def wait_for_state(driver: SimDriver, name: str, state: DomainState) -> DomainInfo:
    async def poll() -> DomainInfo:
        while True:
            info = await driver.get_info(name)
            if info is not None and info.state is state:
                return info
            await asyncio.sleep(0.001)

    return await asyncio.wait_for(poll(), 5.0)


async def wait_for_job(driver: SimDriver, name: str, done: Callable[[MigrationJob], bool]) -> MigrationJob:
    async def poll() -> MigrationJob:
        while True:
            job = await driver.migration_job(name)
            if job is not None and done(job):
                return job
            await asyncio.sleep(0.001)

    return await asyncio.wait_for(poll(), 5.0)


def completed(job: MigrationJob) -> bool:
    return job.phase is MigrationPhase.COMPLETED


async def connected(cloud: SimCloud, host: str) -> SimDriver:
    driver = cloud.driver(f"sim://{host}")
    await driver.connect()
    return driver


def infos(cloud: SimCloud) -> dict[str, dict[str, DomainInfo]]:
    """What every host would report, read without a connection (some hosts are down)."""
    result = {}
    for name in cloud.host_names:
        host = cloud.host_named(name)
        assert host is not None
        result[name] = {d.name: host.info(d) for d in host.domains.values()}
    return result


def domain_state(cloud: SimCloud, host: str, uid: str) -> tuple[DomainState, ExitReason | None]:
    found = cloud.host_named(host)
    assert found is not None
    domain = found.domains[domain_name(uid)]
    return domain.state, domain.exit_reason


# ---------------------------------------------------------------------- the whole world


def test_a_steady_world_is_the_same_after_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    redefined = make_spec("redefined", cpu=2)

    async def first_life() -> SimCloud:
        cloud = make_cloud(path)
        cloud.add_host("h1", vcpus=16, memory_mib=16384)
        cloud.add_host("h2", vcpus=8, memory_mib=8192)
        cloud.add_host("h3", vcpus=4, memory_mib=4096)
        h1, h2, h3 = [await connected(cloud, h) for h in ("h1", "h2", "h3")]
        for driver in (h1, h2):
            await driver.ensure_pool(SHARED)
            await driver.ensure_pool(LOCAL)
        await h1.create_volume(SHARED, "root", 10)
        await h1.create_volume(LOCAL, "data", 5)
        await h2.create_volume(LOCAL, "data", 7)
        await h1.create_volume(LOCAL, "gone", 1)
        cloud.write_volume("sim://shared/root", "root-v1")
        cloud.write_volume("sim://local/data", "h1-data", host="h1")
        cloud.write_volume("sim://local/data", "h2-data", host="h2")
        snap = await h1.snapshot_volume(SHARED, "root", "s1")
        cloud.write_volume("sim://shared/root", "root-v2")
        dropped = await h1.snapshot_volume(SHARED, "root", "dropped")
        await h1.delete_volume_snapshot(dropped)
        await h1.delete_volume(LOCAL, "gone")
        await h1.resize_volume(LOCAL, "data", 6)

        for uid in ("running", "crashed", "paused", "off", "undefined"):
            await h1.ensure_defined(make_spec(uid, disks=("sim://shared/root",) if uid == "running" else ()))
        for uid in ("running", "crashed", "paused"):
            await h1.start(domain_name(uid))
        await h1.ensure_defined(redefined)
        await h1.start(redefined.name)
        for uid in ("running", "crashed", "paused", "redefined"):
            await wait_for_state(h1, domain_name(uid), DomainState.RUNNING)
        await h1.undefine(domain_name("undefined"))
        cloud.inject("h1", FaultKind.CRASH, domain_name("crashed"))
        await h1.pause(domain_name("paused"))
        # a new definition while running: the live instance keeps the old config
        await h1.ensure_defined(make_spec("redefined", cpu=4))
        cloud.write_memory(domain_name("running"), "dirty pages")
        memory = await h1.save_memory(domain_name("running"), "m1")
        forgotten = await h1.save_memory(domain_name("paused"), "m2")
        await h1.delete_volume_snapshot(forgotten)
        cloud.set_dirty_rate(domain_name("running"), 42.0)
        cloud.inject("h1", FaultKind.FAIL_START, domain_name("off"), count=3)
        cloud.inject("h1", FaultKind.FAIL_START, count=1)
        cloud.inject("h2", FaultKind.FAIL_MIGRATION, count=2)
        cloud.inject("h2", FaultKind.STALL_MIGRATION, domain_name("x"))

        await h2.ensure_defined(make_spec("on-h2"))
        await h2.start(domain_name("on-h2"))
        await wait_for_state(h2, domain_name("on-h2"), DomainState.RUNNING)
        cloud.inject("h2", FaultKind.DISCONNECT)
        await h3.ensure_defined(make_spec("on-h3"))
        await h3.start(domain_name("on-h3"))
        await wait_for_state(h3, domain_name("on-h3"), DomainState.RUNNING)
        cloud.inject("h3", FaultKind.HOST_DOWN)
        assert (snap, memory) == (
            "sim-snap://shared/root@s1",
            f"sim-mem://{domain_name('running')}@m1",
        )
        return cloud

    before = life(first_life)
    expected_state, expected_infos = before.snapshot_state(), infos(before)
    expected_faults = {h: before.armed_faults(h) for h in before.host_names}
    expected_memory = before.read_memory(domain_name("running"))
    del before

    after = make_cloud(path)
    assert after.host_names == ["h1", "h2", "h3"]
    assert after.snapshot_state() == expected_state
    assert infos(after) == expected_infos
    assert {h: after.armed_faults(h) for h in after.host_names} == expected_faults
    assert after.armed_faults("h1")[FaultKind.FAIL_START] == {domain_name("off"): 3, None: 1}
    assert after.read_memory(domain_name("running")) == expected_memory == "dirty pages"
    assert after.dirty_rate(domain_name("running")) == 42.0
    assert after.read_volume("sim://shared/root") == "root-v2"
    assert after.read_volume("sim://local/data", host="h1") == "h1-data"
    assert after.read_volume("sim://local/data", host="h2") == "h2-data"
    assert domain_state(after, "h1", "crashed") == (DomainState.SHUTOFF, ExitReason.CRASH)
    assert domain_state(after, "h1", "paused") == (DomainState.PAUSED, None)
    assert domain_state(after, "h3", "on-h3") == (DomainState.SHUTOFF, ExitReason.HOST_FAILURE)
    redefined_info = infos(after)["h1"][redefined.name]
    assert redefined_info.cpu == 2  # the live config, not the new definition
    state = after.snapshot_state()
    assert not state.hosts["h2"].connected and not state.hosts["h3"].up
    assert state.hosts["h1"].used_vcpus == 1 + 1 + 2  # running, paused, redefined (live config)

    async def second_life() -> None:
        h1 = await connected(after, "h1")
        pools = {p.name: p for p in (SHARED, LOCAL)}
        assert [v.size_gib for v in [await h1.resize_volume(pools["local"], "data", 6)]] == [6]
        # the snapshot taken in the first life still reverts the volume (once nothing uses it)
        await h1.destroy(domain_name("running"))
        await h1.revert_volume(SHARED, "root", "sim-snap://shared/root@s1")
        assert after.read_volume("sim://shared/root") == "root-v1"
        with pytest.raises(Exception, match="does not exist"):
            await h1.revert_volume(SHARED, "root", "sim-snap://shared/root@dropped")
        with pytest.raises(Exception, match="does not exist"):
            await h1.restore_memory(make_spec("paused"), f"sim-mem://{domain_name('paused')}@m2")
        assert await h1.get_info(domain_name("undefined")) is None
        # saved memory restores with its marker
        await h1.undefine(domain_name("running"))
        await h1.restore_memory(make_spec("running"), f"sim-mem://{domain_name('running')}@m1")
        assert after.read_memory(domain_name("running")) == "dirty pages"
        # the redefined domain boots its new definition on its next start
        # (its first start spends the host-wide fail-start armed in the first life)
        await h1.destroy(redefined.name)
        await h1.start(redefined.name)
        failed = await wait_for_state(h1, redefined.name, DomainState.SHUTOFF)
        assert failed.exit_reason is ExitReason.START_FAILED
        await h1.start(redefined.name)
        assert (await wait_for_state(h1, redefined.name, DomainState.RUNNING)).cpu == 4
        with pytest.raises(HostUnreachable):
            await connected(after, "h2")
        after.inject("h2", FaultKind.RECONNECT)
        h2 = await connected(after, "h2")
        assert (await h2.get_info(domain_name("on-h2"))) == expected_infos["h2"][domain_name("on-h2")]

    life(second_life)


def test_a_domains_definition_and_live_config_come_back_field_for_field(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    images = PoolRef(name="images", path="images", shared=True, capacity_gib=10)
    live = DomainSpec(
        name=domain_name("full"),
        vm_name="full",
        vm_uid="full",
        cpu=2,
        memory_mib=1024,
        disks=(
            DiskAttachment(path="sim://shared/root", boot_order=1, shared=True, volume="root", size_gib=10),
            DiskAttachment(path="sim://local/data", format="raw", volume="data", size_gib=5),
        ),
        kernel=ImageRef(pool=images, file="vmlinuz"),
        initrd=ImageRef(pool=images, file="initrd.img", format="raw"),
        cmdline="console=ttyS0",
        console_log="/var/log/full.log",
        nics=(NicAttachment(mac="52:54:00:00:00:01", bridge="br0", vlan=7, network="lan"),),
        seed="sim://local/full-seed.iso",
        cdrom=ImageRef(pool=images, file="vp-image-debian.iso", format="iso", written_bytes=4096),
    )
    defined = DomainSpec(**{**live.__dict__, "cpu": 4, "nics": ()})  # redefined while it runs

    async def first_life() -> None:
        cloud = make_cloud(path)
        cloud.add_host("h1", vcpus=8, memory_mib=8192, bridges=("br0",))
        h1 = await connected(cloud, "h1")
        await h1.ensure_defined(live)
        await h1.start(live.name)
        await h1.ensure_defined(defined)

    life(first_life)
    host = make_cloud(path).host_named("h1")
    assert host is not None
    domain = host.domains[live.name]
    assert (domain.spec, domain.live) == (defined, live)


def test_a_reloaded_pool_has_the_room_its_volumes_leave(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"

    async def first_life() -> None:
        cloud = make_cloud(path)
        cloud.add_host("h1", vcpus=4, memory_mib=4096)
        h1 = await connected(cloud, "h1")
        await h1.ensure_pool(LOCAL)  # 50 GiB
        await h1.create_volume(LOCAL, "a", 10)
        await h1.resize_volume(LOCAL, "a", 15)
        await h1.create_volume(LOCAL, "b", 20)

    async def second_life() -> None:
        h1 = await connected(make_cloud(path), "h1")
        with pytest.raises(TransientError, match="15 GiB free"):
            await h1.create_volume(LOCAL, "c", 16)
        await h1.create_volume(LOCAL, "c", 15)

    life(first_life)
    life(second_life)


def test_without_a_state_path_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        cloud = SimCloud(boot_seconds=BOOT_S, shutdown_seconds=SHUTDOWN_S)
        assert cloud.journal is None
        cloud.add_host("h1", vcpus=2, memory_mib=2048)
        h1 = await connected(cloud, "h1")
        await h1.ensure_defined(make_spec("a"))
        await h1.start(domain_name("a"))
        await wait_for_state(h1, domain_name("a"), DomainState.RUNNING)

    monkeypatch.chdir(tmp_path)
    life(main)
    assert list(tmp_path.iterdir()) == []


def test_a_file_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    make_cloud(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema'")
    with pytest.raises(ValueError, match="schema 999"):
        make_cloud(path)


# ---------------------------------------------------------------------- transitions across the gap


def test_transitions_whose_time_is_up_are_finished_on_load(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    clock = Clock()
    long_boot = {"boot_seconds": 30.0, "shutdown_seconds": 30.0}

    async def first_life() -> None:
        cloud = make_cloud(path, clock, **long_boot)
        cloud.add_host("h1", vcpus=8, memory_mib=8192)
        h1 = await connected(cloud, "h1")
        for uid in ("booting", "failing", "stopping"):
            await h1.ensure_defined(make_spec(uid))
        await h1.start(domain_name("booting"))
        cloud.inject("h1", FaultKind.FAIL_START, domain_name("failing"))
        await h1.start(domain_name("failing"))
        await h1.start(domain_name("stopping"))
        await h1.shutdown(domain_name("stopping"))  # a booting guest can be shut down too
        assert domain_state(cloud, "h1", "stopping") == (DomainState.SHUTTING_DOWN, None)

    life(first_life)
    clock.now += 31.0  # the process was dead for longer than any of the transitions
    cloud = make_cloud(path, clock, **long_boot)  # no loop runs: it is all done on load
    assert domain_state(cloud, "h1", "booting") == (DomainState.RUNNING, None)
    assert domain_state(cloud, "h1", "failing") == (DomainState.SHUTOFF, ExitReason.START_FAILED)
    assert domain_state(cloud, "h1", "stopping") == (DomainState.SHUTOFF, ExitReason.STOPPED_BY_SYSTEM)
    assert cloud.snapshot_state().hosts["h1"].used_vcpus == 1
    assert cloud.armed_faults("h1")[FaultKind.FAIL_START] == {}
    del cloud
    # what load decided was written: a third life agrees without any more time passing
    third = make_cloud(path, clock, **long_boot)
    assert domain_state(third, "h1", "failing") == (DomainState.SHUTOFF, ExitReason.START_FAILED)
    assert domain_state(third, "h1", "booting") == (DomainState.RUNNING, None)


def test_a_failing_boot_whose_failure_time_is_up_is_start_failed_even_if_the_boot_time_is_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sim.db"
    clock = Clock()

    async def first_life() -> None:
        cloud = make_cloud(path, clock, boot_seconds=10.0)
        cloud.add_host("h1", vcpus=8, memory_mib=8192)
        h1 = await connected(cloud, "h1")
        await h1.ensure_defined(make_spec("failing"))
        await h1.ensure_defined(make_spec("booting"))
        cloud.inject("h1", FaultKind.FAIL_START, domain_name("failing"))
        await h1.start(domain_name("failing"))
        await h1.start(domain_name("booting"))

    life(first_life)
    clock.now += 6.0  # past the failure point (half the boot), before the end of a boot
    cloud = make_cloud(path, clock, boot_seconds=10.0)
    assert domain_state(cloud, "h1", "failing") == (DomainState.SHUTOFF, ExitReason.START_FAILED)
    assert domain_state(cloud, "h1", "booting") == (DomainState.STARTING, None)


def test_transitions_under_way_resume_for_the_time_left(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    clock = Clock()

    async def first_life() -> None:
        cloud = make_cloud(path, clock)
        cloud.add_host("h1", vcpus=8, memory_mib=8192)
        h1 = await connected(cloud, "h1")
        for uid in ("booting", "failing", "stopping"):
            await h1.ensure_defined(make_spec(uid))
        await h1.start(domain_name("stopping"))
        await wait_for_state(h1, domain_name("stopping"), DomainState.RUNNING)
        await h1.start(domain_name("booting"))
        cloud.inject("h1", FaultKind.FAIL_START, domain_name("failing"))
        await h1.start(domain_name("failing"))
        await h1.shutdown(domain_name("stopping"))

    life(first_life)  # no time passes on the fake clock: every transition has all its time left
    cloud = make_cloud(path, clock)
    assert domain_state(cloud, "h1", "booting") == (DomainState.STARTING, None)
    assert domain_state(cloud, "h1", "failing") == (DomainState.STARTING, None)
    assert domain_state(cloud, "h1", "stopping") == (DomainState.SHUTTING_DOWN, None)
    events: list[DomainEvent] = []

    async def second_life() -> None:
        h1 = cloud.driver("sim://h1")
        h1.set_event_sink(events.append)
        await h1.connect()  # the first call gives the transitions their timers
        await wait_for_state(h1, domain_name("booting"), DomainState.RUNNING)
        failed = await wait_for_state(h1, domain_name("failing"), DomainState.SHUTOFF)
        assert failed.exit_reason is ExitReason.START_FAILED
        stopped = await wait_for_state(h1, domain_name("stopping"), DomainState.SHUTOFF)
        assert stopped.exit_reason is ExitReason.STOPPED_BY_SYSTEM

    life(second_life)
    assert {(e.domain, e.type, e.reason) for e in events} == {
        (domain_name("booting"), DomainEventType.STARTED, None),
        (domain_name("failing"), DomainEventType.CRASHED, ExitReason.START_FAILED),
        (domain_name("stopping"), DomainEventType.STOPPED, ExitReason.STOPPED_BY_SYSTEM),
    }
    third = make_cloud(path, clock)
    assert domain_state(third, "h1", "booting") == (DomainState.RUNNING, None)
    assert domain_state(third, "h1", "failing") == (DomainState.SHUTOFF, ExitReason.START_FAILED)


def test_resume_gives_loaded_transitions_their_timers(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"

    async def first_life() -> None:
        cloud = make_cloud(path)
        cloud.add_host("h1", vcpus=8, memory_mib=8192)
        h1 = await connected(cloud, "h1")
        await h1.ensure_defined(make_spec("booting"))
        await h1.start(domain_name("booting"))

    life(first_life)
    cloud = make_cloud(path)

    async def second_life() -> None:
        await cloud.resume()
        host = cloud.host_named("h1")
        assert host is not None
        await wait_until(lambda: domain_state(cloud, "h1", "booting")[0] is DomainState.RUNNING)

    life(second_life)


# ---------------------------------------------------------------------- faults and migrations


def test_an_armed_fail_start_keeps_failing_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    name = domain_name("vm")

    async def arm() -> None:
        cloud = make_cloud(path)
        cloud.add_host("h1", vcpus=8, memory_mib=8192)
        h1 = await connected(cloud, "h1")
        await h1.ensure_defined(make_spec("vm"))
        cloud.inject("h1", FaultKind.FAIL_START, name, count=3)

    async def one_start() -> DomainInfo:
        cloud = make_cloud(path)
        h1 = await connected(cloud, "h1")
        await h1.start(name)
        return await wait_until_steady(h1, name)

    life(arm)
    outcomes = []
    for _ in range(4):
        info = life(one_start)
        outcomes.append((info.state, info.exit_reason))
    assert outcomes == [(DomainState.SHUTOFF, ExitReason.START_FAILED)] * 3 + [(DomainState.RUNNING, None)]
    assert make_cloud(path).armed_faults("h1")[FaultKind.FAIL_START] == {}


async def wait_until_steady(driver: SimDriver, name: str) -> DomainInfo:
    async def poll() -> DomainInfo:
        while True:
            info = await driver.get_info(name)
            assert info is not None
            if info.state in (DomainState.RUNNING, DomainState.SHUTOFF):
                return info
            await asyncio.sleep(0.001)

    return await asyncio.wait_for(poll(), 5.0)


def test_a_completed_block_migration_is_durable(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    name = domain_name("vm")

    async def first_life() -> str:
        cloud = make_cloud(path)
        cloud.add_host("h1", vcpus=8, memory_mib=8192)
        cloud.add_host("h2", vcpus=8, memory_mib=8192)
        h1, h2 = await connected(cloud, "h1"), await connected(cloud, "h2")
        await h1.ensure_pool(LOCAL)
        await h2.ensure_pool(LOCAL)
        await h1.create_volume(LOCAL, "disk", 1)
        cloud.write_volume("sim://local/disk", "guest data", host="h1")
        await h1.ensure_defined(make_spec("vm", disks=("sim://local/disk",)))
        await h1.start(name)
        await wait_for_state(h1, name, DomainState.RUNNING)
        memory = cloud.read_memory(name)
        await h1.migrate(
            MigrationRequest(domain=name, target_uri="sim://h2", copy_disks=("sim://local/disk",))
        )
        await wait_for_job(h1, name, completed)
        return memory

    memory = life(first_life)
    cloud = make_cloud(path)
    assert cloud.active_hosts(name) == ["h2"]
    assert name not in cloud.snapshot_state().hosts["h1"].domains
    assert cloud.read_memory(name) == memory
    assert cloud.read_volume("sim://local/disk", host="h2") == "guest data"
    assert cloud.read_volume("sim://local/disk", host="h1") == "guest data"  # the source keeps its copy


def test_a_host_that_was_down_stays_down_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    name = domain_name("vm")

    async def first_life() -> None:
        cloud = make_cloud(path)
        cloud.add_host("h1", vcpus=8, memory_mib=8192)
        h1 = await connected(cloud, "h1")
        await h1.ensure_defined(make_spec("vm"))
        await h1.start(name)
        await wait_for_state(h1, name, DomainState.RUNNING)
        cloud.inject("h1", FaultKind.HOST_DOWN)

    life(first_life)
    cloud = make_cloud(path)
    assert not cloud.snapshot_state().hosts["h1"].up

    async def second_life() -> None:
        h1 = cloud.driver("sim://h1")
        with pytest.raises(HostUnreachable):
            await h1.connect()
        cloud.inject("h1", FaultKind.HOST_UP)
        await h1.connect()
        info = await h1.get_info(name)
        assert info is not None
        assert (info.state, info.exit_reason) == (DomainState.SHUTOFF, ExitReason.HOST_FAILURE)

    life(second_life)
    assert make_cloud(path).snapshot_state().hosts["h1"].up


# ---------------------------------------------------------------------- cost of a change


def test_one_start_in_a_world_of_10000_domains_writes_one_row(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    count = 10_000
    slow = {"boot_seconds": 3600.0}  # the boot must not end while the test reads: no timer race

    async def build() -> None:
        cloud = make_cloud(path, **slow)
        for h in range(10):
            cloud.add_host(f"h{h}", vcpus=4096, memory_mib=4096 * 1024)
        drivers = [await connected(cloud, f"h{h}") for h in range(10)]
        for i in range(count):
            await drivers[i % 10].ensure_defined(make_spec(f"vm{i}"))

    life(build)
    cloud = make_cloud(path, **slow)
    assert sum(len(h.domains) for h in cloud.snapshot_state().hosts.values()) == count
    journal = cloud.journal
    assert journal is not None

    async def one_start() -> None:
        h3 = await connected(cloud, "h3")
        rows, changes, commits = journal.rows_written, journal.total_changes, journal.commits
        await h3.start(domain_name("vm3"))
        assert journal.rows_written - rows == 1
        assert journal.total_changes - changes == 1  # SQLite's own count of rows touched
        assert journal.commits - commits == 1
        rows, changes = journal.rows_written, journal.total_changes
        await h3.list_domains()  # a read writes nothing
        assert (journal.rows_written, journal.total_changes) == (rows, changes)

    life(one_start)
    assert domain_state(make_cloud(path, **slow), "h3", "vm3") == (DomainState.STARTING, None)


# ---------------------------------------------------------------------- a real SIGKILL

_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from virtplane.drivers.base import DomainSpec, DomainState, MigrationRequest, PoolRef
    from virtplane.drivers.sim import FaultKind, SimCloud

    async def main() -> None:
        cloud = SimCloud(state_path=sys.argv[1], boot_seconds=0.01, shutdown_seconds=0.01)
        cloud.add_host("h1", vcpus=8, memory_mib=8192)
        cloud.add_host("h2", vcpus=8, memory_mib=8192)
        h1 = cloud.driver("sim://h1")
        await h1.connect()
        pool = PoolRef(name="p", path="p", shared=True)
        await h1.ensure_pool(pool)
        await h1.create_volume(pool, "v", 1)
        cloud.write_volume("sim://p/v", "written before the kill")
        await h1.ensure_defined(DomainSpec(name="d1", vm_name="d1", vm_uid="u1", cpu=1, memory_mib=256))
        await h1.start("d1")
        while (await h1.get_info("d1")).state is not DomainState.RUNNING:
            await asyncio.sleep(0.001)
        cloud.inject("h1", FaultKind.FAIL_START, "d2", count=2)
        await h1.ensure_defined(DomainSpec(name="d2", vm_name="d2", vm_uid="u2", cpu=1, memory_mib=256))
        await h1.ensure_defined(DomainSpec(name="d3", vm_name="d3", vm_uid="u3", cpu=1, memory_mib=256))
        await h1.start("d3")
        while (await h1.get_info("d3")).state is not DomainState.RUNNING:
            await asyncio.sleep(0.001)
        # 256 MiB at 1 MiB/s: still under way long after the kill
        await h1.migrate(MigrationRequest(domain="d3", target_uri="sim://h2", bandwidth_mib_s=1))
        while (await h1.migration_job("d3")).data_processed_mib == 0:
            await asyncio.sleep(0.001)
        print("READY", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def test_the_world_survives_sigkill_of_its_process(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    cloud = SimCloud(state_path=path)
    assert cloud.snapshot_state().hosts["h1"].domains == {
        "d1": DomainState.RUNNING,
        "d2": DomainState.SHUTOFF,
        "d3": DomainState.MIGRATING,  # the migration goes on without the process that started it
    }
    assert cloud.snapshot_state().hosts["h2"].domains == {}

    async def job_after_the_kill() -> MigrationJob | None:
        return await (await connected(cloud, "h1")).migration_job("d3")

    job = life(job_after_the_kill)
    assert job is not None and job.phase is MigrationPhase.RUNNING and 0 < job.data_processed_mib < 256
    assert cloud.read_volume("sim://p/v") == "written before the kill"
    assert cloud.armed_faults("h1")[FaultKind.FAIL_START] == {"d2": 2}
