"""The simulated hypervisor: every operation is followed by a get_info (or state) assertion.

Delays are tiny (boot and shutdown 10 ms; a migration tick is 2 ms worth 0.2
simulated seconds), and ``wait_until`` polls the loop instead of sleeping for
a fixed time: its limit only guards against a hang.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import (
    Capability,
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
from virtplane.drivers.errors import HostUnreachable, NotFound, PermanentError, TransientError
from virtplane.drivers.sim import CONVERGENCE_MIB, FaultKind, SimCloud, SimDriver, SimFaultError
from virtplane.drivers.sim._precopy import DiskCopy, Migration

BOOT_S = 0.01
SHUTDOWN_S = 0.01
TICK_S = 0.002
TIME_SCALE = 100.0  # one tick is 0.2 simulated seconds: 200 MiB at the default 1000 MiB/s


async def wait_until(condition: Callable[[], bool], limit_s: float = 5.0) -> None:
    """Let the loop run until ``condition`` holds; fail (rather than hang) after ``limit_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition never became true")
        await asyncio.sleep(0.001)


async def wait_for_state(driver: SimDriver, name: str, state: DomainState) -> DomainInfo:
    latest: list[DomainInfo | None] = [None]

    async def poll() -> None:
        while True:
            latest[0] = await driver.get_info(name)
            if latest[0] is not None and latest[0].state is state:
                return
            await asyncio.sleep(0.001)

    await asyncio.wait_for(poll(), 5.0)
    assert latest[0] is not None
    return latest[0]


async def wait_for_job(driver: SimDriver, name: str) -> MigrationJob:
    async def poll() -> MigrationJob:
        while True:
            job = await driver.migration_job(name)
            if job is not None and job.finished:
                return job
            await asyncio.sleep(0.001)

    return await asyncio.wait_for(poll(), 5.0)


def make_spec(
    uid: str = "vm1", cpu: int = 1, memory_mib: int = 512, disks: tuple[DiskAttachment, ...] = ()
) -> DomainSpec:
    return DomainSpec(
        name=domain_name(uid), vm_name=f"name-{uid}", vm_uid=uid, cpu=cpu, memory_mib=memory_mib, disks=disks
    )


class Recorder:
    """An event sink that keeps what it receives."""

    def __init__(self) -> None:
        self.events: list[DomainEvent] = []

    def __call__(self, event: DomainEvent) -> None:
        self.events.append(event)

    def kinds(self, domain: str | None = None) -> list[tuple[DomainEventType, ExitReason | None]]:
        return [(e.type, e.reason) for e in self.events if domain is None or e.domain == domain]


@pytest.fixture
def cloud() -> SimCloud:
    sim = SimCloud(
        boot_seconds=BOOT_S, shutdown_seconds=SHUTDOWN_S, time_scale=TIME_SCALE, migration_tick_s=TICK_S
    )
    sim.add_host("h1", vcpus=8, memory_mib=8192)
    sim.add_host("h2", vcpus=8, memory_mib=8192)
    return sim


@pytest.fixture
async def h1(cloud: SimCloud) -> SimDriver:
    driver = cloud.driver("sim://h1")
    await driver.connect()
    return driver


@pytest.fixture
async def h2(cloud: SimCloud) -> SimDriver:
    driver = cloud.driver("sim://h2")
    await driver.connect()
    return driver


@pytest.fixture
def events(h1: SimDriver) -> Recorder:
    recorder = Recorder()
    h1.set_event_sink(recorder)
    return recorder


async def running(driver: SimDriver, spec: DomainSpec) -> None:
    await driver.ensure_defined(spec)
    await driver.start(spec.name)
    await wait_for_state(driver, spec.name, DomainState.RUNNING)


async def let_ticks_pass(source: SimDriver, target: SimDriver, ticks: int) -> None:
    """Return once the simulator's migration clock has ticked ``ticks`` times since the call, as
    counted on a control migration (100 MiB/s: 20 MiB a tick, 1 GiB) that is aborted afterwards."""
    assert ticks <= 50
    control = make_spec("control", memory_mib=1024)
    await running(source, control)
    await source.migrate(MigrationRequest(domain=control.name, target_uri=target.uri, bandwidth_mib_s=100))
    while (job := await source.migration_job(control.name)) is not None and (
        job.data_processed_mib < 20 * ticks
    ):
        assert job.phase is MigrationPhase.RUNNING
        await asyncio.sleep(0.001)
    await source.abort_migration(control.name)


# ---------------------------------------------------------------------- connection and protocol


async def test_driver_satisfies_the_protocol_and_declares_capabilities(h1: SimDriver) -> None:
    assert isinstance(h1, HypervisorDriver)
    assert h1.uri == "sim://h1"
    assert h1.capabilities == frozenset(Capability)
    facts = await h1.host_facts()
    assert (facts.hostname, facts.vcpus, facts.memory_mib) == ("h1", 8, 8192)


async def test_one_driver_per_host_and_unknown_hosts_are_unreachable(cloud: SimCloud) -> None:
    assert cloud.driver("sim://h1") is cloud.driver("sim://h1/")
    ghost = cloud.driver("sim://ghost")
    with pytest.raises(HostUnreachable):
        await ghost.connect()
    with pytest.raises(ValueError):
        cloud.driver("qemu:///system")


async def test_calls_need_an_open_connection(cloud: SimCloud) -> None:
    driver = cloud.driver("sim://h1")
    with pytest.raises(HostUnreachable):
        await driver.list_domains()
    await driver.connect()
    assert await driver.list_domains() == []
    await driver.close()
    with pytest.raises(HostUnreachable):
        await driver.get_info("x")


# ---------------------------------------------------------------------- domain lifecycle


async def test_define_is_idempotent_and_get_info_is_none_when_undefined(
    h1: SimDriver, events: Recorder
) -> None:
    spec = make_spec()
    assert await h1.get_info(spec.name) is None
    await h1.ensure_defined(spec)
    await h1.ensure_defined(spec)
    info = await h1.get_info(spec.name)
    assert info == DomainInfo(spec.name, "vm1", DomainState.SHUTOFF, None, cpu=1, memory_mib=512)
    assert [i.name for i in await h1.list_domains()] == [spec.name]
    assert events.kinds() == [(DomainEventType.DEFINED, None)]


async def test_with_no_boot_time_a_start_returns_running_and_writes_the_state_file_once(
    tmp_path: Path,
) -> None:
    """As libvirt's domain is running when the start returns (its guest boots inside it): no
    timer, both STARTED events, one transaction of the state file. A start made to fail still
    dies after it returned, on a timer."""
    cloud = SimCloud(boot_seconds=0.0, shutdown_seconds=0.0, state_path=tmp_path / "sim.db")
    cloud.add_host("h1", vcpus=8, memory_mib=8192)
    h1 = cloud.driver("sim://h1")
    await h1.connect()
    events = Recorder()
    h1.set_event_sink(events)
    spec, failing = make_spec("vm1"), make_spec("vm2")
    await h1.ensure_defined(spec)
    assert cloud.journal is not None
    commits = cloud.journal.commits
    await h1.start(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    assert cloud.journal.commits == commits + 1
    assert [e.detail for e in events.events if e.type is DomainEventType.STARTED] == ["booting", "booted"]

    await h1.ensure_defined(failing)
    cloud.inject("h1", FaultKind.FAIL_START, failing.name)
    await h1.start(failing.name)
    info = await h1.get_info(failing.name)
    assert info is not None and info.state is DomainState.STARTING
    info = await wait_for_state(h1, failing.name, DomainState.SHUTOFF)
    assert info.exit_reason is ExitReason.START_FAILED


async def test_start_boots_for_boot_seconds_then_runs(h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await h1.ensure_defined(spec)
    await h1.start(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.STARTING
    await wait_for_state(h1, spec.name, DomainState.RUNNING)
    await h1.start(spec.name)  # no-op when running
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING and info.exit_reason is None
    started = [e.detail for e in events.events if e.type is DomainEventType.STARTED]
    assert started == ["booting", "booted"]
    assert events.events[-1].vm_uid == "vm1" and events.events[-1].host_uri == "sim://h1"


async def test_start_of_an_undefined_domain_is_not_found(h1: SimDriver) -> None:
    with pytest.raises(NotFound):
        await h1.start("virtplane-nope")


async def test_graceful_shutdown_goes_through_shutting_down(h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await running(h1, spec)
    await h1.shutdown(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.SHUTTING_DOWN
    with pytest.raises(TransientError):
        await h1.start(spec.name)
    info = await wait_for_state(h1, spec.name, DomainState.SHUTOFF)
    assert info.exit_reason is ExitReason.STOPPED_BY_SYSTEM
    assert events.kinds()[-1] == (DomainEventType.STOPPED, ExitReason.STOPPED_BY_SYSTEM)
    await h1.shutdown(spec.name)  # off already: no-op
    assert (await h1.get_info(spec.name)) == info


async def test_destroy_is_immediate_and_tolerant(h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await running(h1, spec)
    await h1.destroy(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None
    assert (info.state, info.exit_reason) == (DomainState.SHUTOFF, ExitReason.STOPPED_BY_SYSTEM)
    assert events.kinds()[-1] == (DomainEventType.STOPPED, ExitReason.STOPPED_BY_SYSTEM)
    await h1.destroy(spec.name)
    await h1.destroy("virtplane-missing")
    assert (await h1.get_info(spec.name)) == info


async def test_destroy_during_boot_cancels_the_boot(h1: SimDriver) -> None:
    spec = make_spec()
    await h1.ensure_defined(spec)
    await h1.start(spec.name)
    await h1.destroy(spec.name)
    # a boot started after the destroy ends after the cancelled boot would have
    await running(h1, make_spec("later"))
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.SHUTOFF


async def test_pause_and_resume(h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await running(h1, spec)
    await h1.pause(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.PAUSED
    await h1.shutdown(spec.name)  # a paused guest ignores ACPI
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.PAUSED
    await h1.resume(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    assert events.kinds()[-2:] == [(DomainEventType.PAUSED, None), (DomainEventType.RESUMED, None)]
    await h1.destroy(spec.name)
    with pytest.raises(PermanentError):
        await h1.pause(spec.name)
    with pytest.raises(PermanentError):
        await h1.resume(spec.name)


async def test_undefine_only_when_off(h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await running(h1, spec)
    with pytest.raises(PermanentError):
        await h1.undefine(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    await h1.destroy(spec.name)
    await h1.undefine(spec.name)
    assert await h1.get_info(spec.name) is None
    assert events.kinds()[-1] == (DomainEventType.UNDEFINED, None)
    await h1.undefine(spec.name)  # gone already: fine


async def test_redefining_a_running_domain_changes_only_the_stored_definition(h1: SimDriver) -> None:
    spec = make_spec(cpu=1)
    await running(h1, spec)
    bigger = make_spec(cpu=4)
    await h1.ensure_defined(bigger)
    info = await h1.get_info(spec.name)
    assert info is not None and (info.state, info.cpu) == (DomainState.RUNNING, 1)
    await h1.destroy(spec.name)
    await running(h1, bigger)
    info = await h1.get_info(spec.name)
    assert info is not None and info.cpu == 4


# ---------------------------------------------------------------------- capacity


async def test_memory_is_enforced_on_start_vcpus_are_not(cloud: SimCloud, h1: SimDriver) -> None:
    """h1 has 8 vCPUs and 8 GiB: like a real hypervisor it runs more vCPUs than it has
    cores (the control plane's allocation ratio decides how many), never more memory."""
    big = make_spec("big", cpu=6, memory_mib=6144)
    second = make_spec("second", cpu=4, memory_mib=4096)
    huge = make_spec("huge", cpu=1, memory_mib=16384)
    many_vcpus = make_spec("many-vcpus", cpu=16, memory_mib=1024)
    for spec in (big, second, huge, many_vcpus):
        await h1.ensure_defined(spec)
    await h1.start(big.name)
    with pytest.raises(TransientError, match=r"full: domain .* needs 4096 MiB \(4 vcpus\), 2048 MiB free"):
        await h1.start(second.name)
    info = await h1.get_info(second.name)
    assert info is not None and info.state is DomainState.SHUTOFF
    with pytest.raises(PermanentError, match="in total"):
        await h1.start(huge.name)
    await h1.start(many_vcpus.name)  # 6 + 16 vCPUs on 8 cores: overcommitted, and it runs
    state = cloud.snapshot_state().hosts["h1"]
    assert (state.used_vcpus, state.used_memory_mib) == (22, 7168)
    await h1.destroy(big.name)
    await h1.start(second.name)
    info = await h1.get_info(second.name)
    assert info is not None and info.state is DomainState.STARTING
    state = cloud.snapshot_state().hosts["h1"]
    assert (state.used_vcpus, state.used_memory_mib) == (20, 5120)


# ---------------------------------------------------------------------- faults


def test_fault_kind_values() -> None:
    assert [k.value for k in FaultKind] == [
        "guest-shutdown",
        "guest-reset",
        "crash",
        "fail-start",
        "fail-migration",
        "stall-migration",
        "host-down",
        "host-up",
        "disconnect",
        "reconnect",
        "ignore-unplug",
    ]


async def test_guest_shutdown(cloud: SimCloud, h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await running(h1, spec)
    cloud.inject("h1", FaultKind.GUEST_SHUTDOWN, spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None
    assert (info.state, info.exit_reason) == (DomainState.SHUTOFF, ExitReason.GUEST_SHUTDOWN)
    assert events.kinds()[-1] == (DomainEventType.STOPPED, ExitReason.GUEST_SHUTDOWN)
    assert cloud.fault_log[-1].kind is FaultKind.GUEST_SHUTDOWN


async def test_guest_reset_reboots_and_stays_up(cloud: SimCloud, h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await running(h1, spec)
    before = cloud.read_memory(spec.name)
    cloud.inject("sim://h1", "guest-reset", spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.STARTING
    assert events.kinds()[-1] == (DomainEventType.RESET, ExitReason.GUEST_RESET)
    info = await wait_for_state(h1, spec.name, DomainState.RUNNING)
    assert info.exit_reason is None
    assert cloud.read_memory(spec.name) != before  # a new boot


async def test_crash(cloud: SimCloud, h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await running(h1, spec)
    cloud.inject("h1", FaultKind.CRASH, spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and (info.state, info.exit_reason) == (DomainState.SHUTOFF, ExitReason.CRASH)
    assert events.kinds()[-1] == (DomainEventType.CRASHED, ExitReason.CRASH)
    assert cloud.snapshot_state().hosts["h1"].used_vcpus == 0


async def test_guest_faults_need_a_live_domain(cloud: SimCloud, h1: SimDriver) -> None:
    spec = make_spec()
    await h1.ensure_defined(spec)
    for kind in (FaultKind.CRASH, FaultKind.GUEST_SHUTDOWN, FaultKind.GUEST_RESET):
        with pytest.raises(SimFaultError):
            cloud.inject("h1", kind, spec.name)
    with pytest.raises(SimFaultError):
        cloud.inject("h1", FaultKind.CRASH)  # no domain named
    with pytest.raises(SimFaultError):
        cloud.inject("nowhere", FaultKind.HOST_DOWN)
    assert cloud.fault_log == []


async def test_fail_start_dies_while_booting_count_times(
    cloud: SimCloud, h1: SimDriver, events: Recorder
) -> None:
    spec = make_spec()
    await h1.ensure_defined(spec)
    cloud.inject("h1", FaultKind.FAIL_START, spec.name, count=2)
    for _ in range(2):
        await h1.start(spec.name)
        info = await h1.get_info(spec.name)
        assert info is not None and info.state is DomainState.STARTING
        info = await wait_for_state(h1, spec.name, DomainState.SHUTOFF)
        assert info.exit_reason is ExitReason.START_FAILED
        assert events.kinds()[-1] == (DomainEventType.CRASHED, ExitReason.START_FAILED)
    assert "booted" not in {e.detail for e in events.events}  # it never reached RUNNING
    await running(h1, spec)  # the third start works
    assert cloud.armed_faults("h1")[FaultKind.FAIL_START] == {}


async def test_fail_start_without_a_domain_hits_any_domain_of_the_host(
    cloud: SimCloud, h1: SimDriver
) -> None:
    spec = make_spec()
    await h1.ensure_defined(spec)
    cloud.inject("h1", FaultKind.FAIL_START)
    await h1.start(spec.name)
    info = await wait_for_state(h1, spec.name, DomainState.SHUTOFF)
    assert info.exit_reason is ExitReason.START_FAILED


async def test_host_down_and_up(cloud: SimCloud, h1: SimDriver, events: Recorder) -> None:
    spec, idle = make_spec("a"), make_spec("b")
    await running(h1, spec)
    await h1.ensure_defined(idle)
    cloud.inject("h1", FaultKind.HOST_DOWN)
    assert events.kinds()[-1] == (DomainEventType.HOST_DOWN, ExitReason.HOST_FAILURE)
    assert events.events[-1].domain == ""
    with pytest.raises(HostUnreachable):
        await h1.get_info(spec.name)
    with pytest.raises(HostUnreachable):
        await h1.connect()
    assert cloud.active_hosts(spec.name) == []
    cloud.inject("h1", FaultKind.HOST_UP)
    info = await h1.get_info(spec.name)
    assert info is not None and (info.state, info.exit_reason) == (
        DomainState.SHUTOFF,
        ExitReason.HOST_FAILURE,
    )
    info = await h1.get_info(idle.name)
    assert info is not None and info.exit_reason is None  # it was off: nothing happened to it
    assert events.kinds()[-2:] == [
        (DomainEventType.HOST_UP, None),
        (DomainEventType.STOPPED, ExitReason.HOST_FAILURE),
    ]
    await running(h1, spec)  # the host works again


async def test_disconnect_keeps_domains_running(cloud: SimCloud, h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await h1.ensure_defined(spec)
    await h1.start(spec.name)
    seen = len(events.events)
    cloud.inject("h1", FaultKind.DISCONNECT)
    with pytest.raises(HostUnreachable):
        await h1.get_info(spec.name)
    await wait_until(lambda: cloud.snapshot_state().hosts["h1"].domains[spec.name] is DomainState.RUNNING)
    assert len(events.events) == seen  # the "booted" event was lost with the connection
    cloud.inject("h1", FaultKind.RECONNECT)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    assert [r.kind for r in cloud.fault_log] == [FaultKind.DISCONNECT, FaultKind.RECONNECT]


async def test_a_failing_event_sink_does_not_break_the_simulation(h1: SimDriver) -> None:
    def broken(event: DomainEvent) -> None:
        raise RuntimeError("sink bug")

    h1.set_event_sink(broken)
    spec = make_spec()
    await running(h1, spec)
    h1.set_event_sink(None)
    await h1.destroy(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.SHUTOFF


# ---------------------------------------------------------------------- storage


SHARED = PoolRef(name="shared", path="shared", shared=True, capacity_gib=100)
LOCAL = PoolRef(name="local", path="local", shared=False, capacity_gib=50)


async def test_shared_pool_is_one_pool_for_every_host(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    await h1.ensure_pool(SHARED)
    with pytest.raises(NotFound):
        await h2.create_volume(SHARED, "v", 1)  # h2 has not ensured the pool yet
    await h2.ensure_pool(SHARED)
    info = await h1.create_volume(SHARED, "disk0", 10)
    assert (info.name, info.path, info.size_gib) == ("disk0", "sim://shared/disk0", 10)
    cloud.write_volume(info.path, "written on h1")
    seen = await h2.create_volume(SHARED, "disk0", 10)  # the same volume, seen from h2
    assert seen == info and cloud.read_volume(seen.path) == "written on h1"


async def test_local_pools_are_per_host(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    await h1.ensure_pool(LOCAL)
    await h2.ensure_pool(LOCAL)
    a = await h1.create_volume(LOCAL, "disk", 1)
    await h2.create_volume(LOCAL, "disk", 1)
    cloud.write_volume(a.path, "h1 data", host="h1")
    assert cloud.read_volume(a.path, host="h1") == "h1 data"
    assert cloud.read_volume(a.path, host="h2") == ""
    with pytest.raises(SimFaultError):
        cloud.read_volume(a.path)  # ambiguous without a host
    with pytest.raises(PermanentError):
        await h1.ensure_pool(PoolRef(name="local", path="local", shared=True))


async def test_pool_capacity_is_enforced(h1: SimDriver) -> None:
    await h1.ensure_pool(LOCAL)
    await h1.create_volume(LOCAL, "a", 30)
    with pytest.raises(TransientError, match="full"):
        await h1.create_volume(LOCAL, "b", 30)
    with pytest.raises(PermanentError):
        await h1.create_volume(LOCAL, "c", 60)
    with pytest.raises(TransientError):
        await h1.resize_volume(LOCAL, "a", 51)
    assert (await h1.resize_volume(LOCAL, "a", 40)).size_gib == 40
    with pytest.raises(PermanentError):
        await h1.resize_volume(LOCAL, "a", 10)  # no shrinking
    await h1.delete_volume(LOCAL, "a")
    await h1.delete_volume(LOCAL, "a")  # gone already: fine
    assert (await h1.create_volume(LOCAL, "b", 30)).size_gib == 30
    assert (await h1.create_volume(LOCAL, "b", 30)).size_gib == 30  # a re-run of the same create


async def assert_free_gib(driver: SimDriver, pool: PoolRef, free_gib: int) -> None:
    """What the pool has room for, seen as libvirt users see it: one GiB more does not fit."""
    with pytest.raises(TransientError, match=f"{free_gib} GiB free"):
        await driver.create_volume(pool, "probe", free_gib + 1)
    await driver.create_volume(pool, "probe", free_gib)
    await driver.delete_volume(pool, "probe")


async def test_a_pools_free_space_follows_every_change_of_its_volumes(h1: SimDriver) -> None:
    """The pool keeps its used space as a tally (not a sum over thousands of volumes per
    create), so every way a volume comes, goes or changes size must move it."""
    await h1.ensure_pool(LOCAL)  # 50 GiB
    await h1.create_volume(LOCAL, "a", 10)
    small = await h1.snapshot_volume(LOCAL, "a", "small")
    await h1.resize_volume(LOCAL, "a", 20)
    await assert_free_gib(h1, LOCAL, 30)
    await h1.create_volume(LOCAL, "b", 5)
    await assert_free_gib(h1, LOCAL, 25)
    await h1.revert_volume(LOCAL, "a", small)  # back to 10 GiB
    await assert_free_gib(h1, LOCAL, 35)
    await h1.delete_volume(LOCAL, "b")
    await assert_free_gib(h1, LOCAL, 40)


async def test_volume_from_a_library_image(cloud: SimCloud, h1: SimDriver) -> None:
    library = PoolRef(name="library", path="library", shared=True)
    cloud.put_image_file("library", "cirros.qcow2", "golden", size_gib=3)
    await h1.ensure_pool(library)
    await h1.ensure_pool(SHARED)
    image = ImageRef(library, "cirros.qcow2", "qcow2")
    assert (await h1.inspect_image(image)).size_bytes == 3 * 1024**3
    clone = await h1.create_volume(SHARED, "clone", 2, image)
    assert cloud.read_volume(clone.path) == "golden" and clone.size_gib == 3  # at least the image's size
    with pytest.raises(NotFound):
        await h1.create_volume(SHARED, "other", 2, ImageRef(library, "missing.qcow2", "qcow2"))


async def test_snapshot_and_revert_restore_content(cloud: SimCloud, h1: SimDriver) -> None:
    await h1.ensure_pool(SHARED)
    vol = await h1.create_volume(SHARED, "disk", 5)
    cloud.write_volume(vol.path, "before")
    handle = await h1.snapshot_volume(SHARED, "disk", "snap1")
    cloud.write_volume(vol.path, "after")
    await h1.revert_volume(SHARED, "disk", handle)
    assert cloud.read_volume(vol.path) == "before"
    await h1.delete_volume_snapshot(handle)
    await h1.delete_volume_snapshot(handle)  # tolerant
    with pytest.raises(NotFound):
        await h1.revert_volume(SHARED, "disk", handle)
    assert cloud.read_volume(vol.path) == "before"


async def test_volumes_of_a_live_domain_cannot_be_reverted_or_deleted(cloud: SimCloud, h1: SimDriver) -> None:
    await h1.ensure_pool(SHARED)
    vol = await h1.create_volume(SHARED, "disk", 5)
    handle = await h1.snapshot_volume(SHARED, "disk", "s")
    spec = make_spec(disks=(DiskAttachment(path=vol.path, shared=True, volume="disk", size_gib=5),))
    await running(h1, spec)
    with pytest.raises(TransientError, match="using it"):
        await h1.revert_volume(SHARED, "disk", handle)
    with pytest.raises(TransientError):
        await h1.delete_volume(SHARED, "disk")
    await h1.destroy(spec.name)
    await h1.revert_volume(SHARED, "disk", handle)
    await h1.delete_volume(SHARED, "disk")


async def test_save_and_restore_memory(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    spec = make_spec()
    await running(h1, spec)
    cloud.write_memory(spec.name, "state at snapshot")
    handle = await h1.save_memory(spec.name, "snap1")
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING  # it keeps running
    with pytest.raises(PermanentError):
        await h1.restore_memory(spec, handle)  # still running here
    await h1.destroy(spec.name)
    await h1.undefine(spec.name)
    await h2.restore_memory(spec, handle)
    info = await h2.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING  # no boot
    assert cloud.read_memory(spec.name) == "state at snapshot"
    with pytest.raises(NotFound):
        await h2.restore_memory(spec, "sim-mem://nope@x")
    await h2.destroy(spec.name)
    with pytest.raises(PermanentError):
        await h2.save_memory(spec.name, "snap2")


# ---------------------------------------------------------------------- live migration


async def test_live_migration_moves_the_domain(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    source_events, target_events = Recorder(), Recorder()
    h1.set_event_sink(source_events)
    h2.set_event_sink(target_events)
    spec = make_spec(memory_mib=2048)
    await running(h1, spec)
    cloud.write_memory(spec.name, "guest memory")
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.MIGRATING
    with pytest.raises(PermanentError):
        await h1.undefine(spec.name)
    job = await wait_for_job(h1, spec.name)
    assert job.phase is MigrationPhase.COMPLETED
    assert job.data_processed_mib == pytest.approx(2048) and job.data_remaining_mib == 0
    assert await h1.get_info(spec.name) is None
    info = await h2.get_info(spec.name)
    assert info is not None and (info.state, info.memory_mib) == (DomainState.RUNNING, 2048)
    assert cloud.read_memory(spec.name) == "guest memory"
    assert cloud.active_hosts(spec.name) == ["h2"]
    assert source_events.kinds(spec.name)[-1] == (DomainEventType.MIGRATED, None)
    assert [k for k, _ in target_events.kinds(spec.name)] == [
        DomainEventType.DEFINED,
        DomainEventType.STARTED,
    ]
    assert (await h2.migration_job(spec.name)) == job  # finished jobs stay queryable
    state = cloud.snapshot_state()
    assert state.hosts["h1"].used_memory_mib == 0 and state.hosts["h2"].used_memory_mib == 2048


async def test_never_live_on_two_hosts_during_migration(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    cloud.set_dirty_rate(spec.name, 300)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    placements: list[list[str]] = []
    while (job := await h1.migration_job(spec.name)) is not None and not job.finished:
        placements.append(cloud.snapshot_state().active_hosts(spec.name))
        await asyncio.sleep(0.001)
    assert job is not None and job.phase is MigrationPhase.COMPLETED
    assert job.iteration > 1  # the dirty rate forced more than one pass
    assert all(p == ["h1"] for p in placements)
    assert cloud.snapshot_state().placements() == {spec.name: ["h2"]}


async def test_block_migration_copies_local_disks(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    await h1.ensure_pool(LOCAL)
    await h2.ensure_pool(LOCAL)
    vol = await h1.create_volume(LOCAL, "root", 2)
    cloud.write_volume(vol.path, "root fs", host="h1")
    spec = make_spec(disks=(DiskAttachment(path=vol.path, volume="root", size_gib=2),))
    await running(h1, spec)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri, copy_disks=(vol.path,)))
    cloud.write_volume(vol.path, "root fs, written during the copy", host="h1")
    job = await wait_for_job(h1, spec.name)
    assert job.phase is MigrationPhase.COMPLETED
    assert job.data_processed_mib == pytest.approx(2 * 1024 + 512)
    info = await h2.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    assert cloud.read_volume(vol.path, host="h2") == "root fs, written during the copy"
    assert cloud.read_volume(vol.path, host="h1") == "root fs, written during the copy"  # kept


async def test_block_migration_needs_the_local_pool_on_the_target(h1: SimDriver, h2: SimDriver) -> None:
    await h1.ensure_pool(LOCAL)
    vol = await h1.create_volume(LOCAL, "root", 2)
    spec = make_spec(disks=(DiskAttachment(path=vol.path, volume="root", size_gib=2),))
    await running(h1, spec)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri, copy_disks=(vol.path,)))
    job = await h1.migration_job(spec.name)
    assert job is not None and job.phase is MigrationPhase.FAILED and "local pool" in job.error
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING


async def test_failed_migration_leaves_the_domain_on_the_source(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver, events: Recorder
) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    cloud.inject("h1", FaultKind.FAIL_MIGRATION, spec.name)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    job = await wait_for_job(h1, spec.name)
    assert job.phase is MigrationPhase.FAILED and "injected" in job.error
    assert job.data_processed_mib == pytest.approx(2048)  # half way
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    assert await h2.get_info(spec.name) is None
    assert events.kinds(spec.name)[-1] == (DomainEventType.MIGRATION_FAILED, None)
    assert cloud.snapshot_state().hosts["h2"].used_memory_mib == 0
    # the fault was used up: the next migration works
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    assert (await wait_for_job(h1, spec.name)).phase is MigrationPhase.COMPLETED


async def test_host_wide_fail_migration_hits_any_domain(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    spec = make_spec()
    await running(h1, spec)
    cloud.inject("h1", FaultKind.FAIL_MIGRATION)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    assert (await wait_for_job(h1, spec.name)).phase is MigrationPhase.FAILED


async def test_stalled_migration_makes_no_progress_until_aborted(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    cloud.inject("h1", FaultKind.STALL_MIGRATION, spec.name)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))

    async def processed() -> float:
        job = await h1.migration_job(spec.name)
        assert job is not None and job.phase is MigrationPhase.RUNNING
        return job.data_processed_mib

    await wait_until(lambda: cloud.snapshot_state().hosts["h1"].domains[spec.name] is DomainState.MIGRATING)
    first = await processed()
    while (stalled_at := await processed()) < 2048 - 1e-6:  # half way: the fault strikes
        await asyncio.sleep(0.001)
    assert stalled_at == pytest.approx(2048)
    await let_ticks_pass(h1, h2, 20)
    assert await processed() == stalled_at >= first
    await h1.abort_migration(spec.name)
    job = await h1.migration_job(spec.name)
    assert job is not None and job.phase is MigrationPhase.ABORTED
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    assert cloud.active_hosts(spec.name) == ["h1"]


async def test_high_dirty_rate_never_converges(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    spec = make_spec(memory_mib=1024)
    await running(h1, spec)
    cloud.set_dirty_rate(spec.name, 1500)  # above the 1000 MiB/s link
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))

    async def iteration() -> int:
        job = await h1.migration_job(spec.name)
        assert job is not None and job.phase is MigrationPhase.RUNNING
        return job.iteration

    # 35 passes of 1024 MiB each take about 36 simulated seconds, i.e. ~180 ticks
    while await iteration() <= 35:
        await asyncio.sleep(TICK_S)
    job = await h1.migration_job(spec.name)
    assert job is not None and job.data_remaining_mib >= CONVERGENCE_MIB
    assert job.data_total_mib == pytest.approx(job.data_processed_mib + job.data_remaining_mib)
    await h1.abort_migration(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    assert await h2.get_info(spec.name) is None


async def test_bandwidth_limit_of_the_request_slows_the_copy(h1: SimDriver, h2: SimDriver) -> None:
    spec = make_spec(memory_mib=1024)
    await running(h1, spec)
    # 1 MiB/s: one tick (0.2 simulated s) moves 0.2 MiB
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri, bandwidth_mib_s=1))
    while (job := await h1.migration_job(spec.name)) is not None and job.data_processed_mib == 0:
        await asyncio.sleep(0.001)
    assert job is not None and job.phase is MigrationPhase.RUNNING
    assert 0 < job.data_processed_mib < 10, "a tick or two at 1 MiB/s, not 200 MiB a tick"
    await h1.abort_migration(spec.name)


async def test_a_late_tick_does_not_delay_the_copy(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    """A real copy runs on its own time, whatever the control plane's loop is doing: ticks
    stay on the grid of the first, and those a busy loop held back all run when it frees."""
    spec = make_spec(memory_mib=1024)
    await running(h1, spec)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri, bandwidth_mib_s=1))
    migration = cloud.migrations.latest(spec.name)
    assert migration is not None and migration.timer is not None
    first_due = migration.timer.when()
    mib_per_tick = 1 * TICK_S * TIME_SCALE
    time.sleep(6 * TICK_S)  # a busy loop: the first tick fires five ticks late
    loop = asyncio.get_running_loop()
    await wait_until(lambda: migration.timer is not None and migration.timer.when() > loop.time())
    assert migration.timer is not None
    ticks_due = (migration.timer.when() - first_due) / TICK_S  # ticks due before the pending one
    assert ticks_due >= 5
    assert migration.processed_mib / mib_per_tick == pytest.approx(ticks_due, abs=1e-6)
    await h1.abort_migration(spec.name)


async def test_migration_to_a_full_target_fails_cleanly(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    filler = make_spec("filler", memory_mib=8192)
    await running(h2, filler)
    spec = make_spec()
    await running(h1, spec)
    cloud.inject("h1", FaultKind.FAIL_MIGRATION, spec.name)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    job = await h1.migration_job(spec.name)
    assert job is not None and job.phase is MigrationPhase.FAILED and "full" in job.error
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    # the refused migration did not spend the armed fault
    assert cloud.armed_faults("h1")[FaultKind.FAIL_MIGRATION] == {spec.name: 1}


async def test_incoming_migration_holds_room_on_the_target(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    spec = make_spec(memory_mib=6144)
    await running(h1, spec)
    cloud.inject("h1", FaultKind.STALL_MIGRATION, spec.name)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    rival = make_spec("rival", memory_mib=4096)
    await h2.ensure_defined(rival)
    with pytest.raises(TransientError):
        await h2.start(rival.name)
    await h1.abort_migration(spec.name)
    await h2.start(rival.name)
    info = await h2.get_info(rival.name)
    assert info is not None and info.state is DomainState.STARTING


async def test_the_migration_record_has_every_start_and_end_in_order(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    tiny = cloud.driver(cloud.add_host("tiny", vcpus=1, memory_mib=256))
    await tiny.connect()
    fast, stalled = make_spec("fast"), make_spec("stalled")
    for spec in (fast, stalled):
        await running(h1, spec)
    cloud.inject("h1", FaultKind.STALL_MIGRATION, stalled.name)
    await h1.migrate(MigrationRequest(domain=stalled.name, target_uri=h2.uri))
    await h1.migrate(MigrationRequest(domain=fast.name, target_uri=h2.uri))
    await wait_for_job(h1, fast.name)
    await h2.migrate(MigrationRequest(domain=fast.name, target_uri=tiny.uri))  # too small: refused at once
    await h1.abort_migration(stalled.name)
    assert [(t.domain, t.source, t.target, t.outcome) for t in cloud.migration_record()] == [
        (stalled.name, "h1", "h2", None),
        (fast.name, "h1", "h2", None),
        (fast.name, "h1", "h2", MigrationPhase.COMPLETED),
        (fast.name, "h2", "tiny", None),
        (fast.name, "h2", "tiny", MigrationPhase.FAILED),
        (stalled.name, "h1", "h2", MigrationPhase.ABORTED),
    ]
    times = [t.time for t in cloud.migration_record()]
    assert times == sorted(times)


async def test_bad_migration_requests_raise(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    spec = make_spec()
    await h1.ensure_defined(spec)
    with pytest.raises(PermanentError):
        await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))  # not running
    with pytest.raises(NotFound):
        await h1.migrate(MigrationRequest(domain="virtplane-x", target_uri=h2.uri))
    await running(h1, spec)
    with pytest.raises(PermanentError):
        await h1.migrate(MigrationRequest(domain=spec.name, target_uri="sim://ghost"))
    with pytest.raises(PermanentError):
        await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h1.uri))
    with pytest.raises(NotFound):
        await h1.abort_migration(spec.name)
    assert await h1.migration_job(spec.name) is None


async def test_destroy_during_migration_fails_it(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    cloud.inject("h1", FaultKind.STALL_MIGRATION, spec.name)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    await h1.destroy(spec.name)
    job = await h1.migration_job(spec.name)
    assert job is not None and job.phase is MigrationPhase.FAILED
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.SHUTOFF
    assert cloud.snapshot_state().hosts["h2"].used_vcpus == 0


async def test_target_going_down_fails_the_migration(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    cloud.inject("h1", FaultKind.STALL_MIGRATION, spec.name)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    cloud.inject("h2", FaultKind.HOST_DOWN)
    job = await h1.migration_job(spec.name)
    assert job is not None and job.phase is MigrationPhase.FAILED and "down" in job.error
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING


async def test_crash_during_migration(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    cloud.inject("h1", FaultKind.STALL_MIGRATION, spec.name)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    cloud.inject("h1", FaultKind.CRASH, spec.name)
    job = await h1.migration_job(spec.name)
    assert job is not None and job.phase is MigrationPhase.FAILED
    info = await h1.get_info(spec.name)
    assert info is not None and (info.state, info.exit_reason) == (DomainState.SHUTOFF, ExitReason.CRASH)
    assert cloud.active_hosts(spec.name) == []


# ---------------------------------------------------------------------- scale


async def test_a_fleet_of_500_hosts_and_10000_domains() -> None:
    sim = SimCloud(boot_seconds=0.0, shutdown_seconds=0.0)
    drivers = []
    for index in range(500):
        driver = sim.driver(sim.add_host(f"host{index}", vcpus=64, memory_mib=256 * 1024))
        await driver.connect()
        drivers.append(driver)
    for index in range(10_000):
        driver = drivers[index % 500]
        spec = make_spec(f"vm{index}", cpu=2, memory_mib=1024)
        await driver.ensure_defined(spec)
        await driver.start(spec.name)
    await wait_until(
        lambda: all(
            state is DomainState.RUNNING
            for host in sim.snapshot_state().hosts.values()
            for state in host.domains.values()
        )
    )
    assert len(await drivers[7].list_domains()) == 20
    placements = sim.snapshot_state().placements()
    assert len(placements) == 10_000
    assert all(len(hosts) == 1 for hosts in placements.values())


async def test_migration_refuses_disks_the_target_cannot_reach(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    await h1.ensure_pool(LOCAL)
    await h1.ensure_pool(SHARED)
    await h2.ensure_pool(LOCAL)
    local = await h1.create_volume(LOCAL, "root", 1)
    shared = await h1.create_volume(SHARED, "data", 1)
    spec = make_spec(
        disks=(
            DiskAttachment(path=local.path, volume="root", size_gib=1),
            DiskAttachment(path=shared.path, shared=True, volume="data", size_gib=1),
        )
    )
    await running(h1, spec)
    # a local disk left behind
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    job = await h1.migration_job(spec.name)
    assert job is not None and job.phase is MigrationPhase.FAILED and local.path in job.error
    # the local disk copied, but h2 does not see the shared pool
    request = MigrationRequest(domain=spec.name, target_uri=h2.uri, copy_disks=(local.path,))
    await h1.migrate(request)
    job = await h1.migration_job(spec.name)
    assert job is not None and job.phase is MigrationPhase.FAILED and shared.path in job.error
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    await h2.ensure_pool(SHARED)
    await h1.migrate(request)
    assert (await wait_for_job(h1, spec.name)).phase is MigrationPhase.COMPLETED
    assert cloud.active_hosts(spec.name) == ["h2"]


async def test_a_paused_domain_arrives_paused(h1: SimDriver, h2: SimDriver) -> None:
    spec = make_spec()
    await running(h1, spec)
    await h1.pause(spec.name)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    with pytest.raises(TransientError):
        await h1.resume(spec.name)  # busy migrating
    assert (await wait_for_job(h1, spec.name)).phase is MigrationPhase.COMPLETED
    info = await h2.get_info(spec.name)
    assert info is not None and info.state is DomainState.PAUSED


async def test_guest_reset_during_migration_does_not_stop_it(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    cloud.inject("h1", FaultKind.GUEST_RESET, spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.MIGRATING
    assert (await wait_for_job(h1, spec.name)).phase is MigrationPhase.COMPLETED
    assert cloud.active_hosts(spec.name) == ["h2"]


async def test_source_going_down_during_migration(cloud: SimCloud, h1: SimDriver, h2: SimDriver) -> None:
    spec = make_spec(memory_mib=4096)
    await running(h1, spec)
    cloud.inject("h1", FaultKind.STALL_MIGRATION, spec.name)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    cloud.inject("h1", FaultKind.HOST_DOWN)
    job = await h2.migration_job(spec.name)  # the target still answers
    assert job is not None and job.phase is MigrationPhase.FAILED
    assert cloud.active_hosts(spec.name) == []
    assert cloud.snapshot_state().hosts["h2"].used_vcpus == 0
    cloud.inject("h1", FaultKind.HOST_UP)
    info = await h1.get_info(spec.name)
    assert info is not None and info.exit_reason is ExitReason.HOST_FAILURE


async def test_no_events_over_a_closed_connection(cloud: SimCloud, h1: SimDriver, events: Recorder) -> None:
    spec = make_spec()
    await h1.ensure_defined(spec)
    await h1.close()
    await h1.connect()
    seen = len(events.events)
    await h1.start(spec.name)
    await h1.close()
    await wait_until(lambda: cloud.snapshot_state().hosts["h1"].domains[spec.name] is DomainState.RUNNING)
    await h1.connect()
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING
    assert [e.detail for e in events.events[seen:]] == ["booting"]


async def test_connection_faults_apply_to_a_down_host_too(cloud: SimCloud, h1: SimDriver) -> None:
    cloud.inject("h1", FaultKind.HOST_DOWN)
    cloud.inject("h1", FaultKind.DISCONNECT)
    cloud.inject("h1", FaultKind.HOST_UP)
    with pytest.raises(HostUnreachable):
        await h1.list_domains()
    cloud.inject("h1", FaultKind.RECONNECT)
    assert await h1.list_domains() == []
    assert len(cloud.fault_log) == 4


async def test_pre_copy_iterations_follow_the_dirty_rate(
    cloud: SimCloud, h1: SimDriver, h2: SimDriver
) -> None:
    # 1000 MiB/s link, 500 MiB/s dirtied: passes of 1024, 512, 256, 128 and 64 MiB; the
    # 5th pass dirties 32 MiB (< 64), which goes over at the switch-over.
    spec = make_spec(memory_mib=1024)
    await running(h1, spec)
    cloud.set_dirty_rate(spec.name, 500)
    await h1.migrate(MigrationRequest(domain=spec.name, target_uri=h2.uri))
    job = await wait_for_job(h1, spec.name)
    assert job.phase is MigrationPhase.COMPLETED
    assert job.iteration == 5
    assert job.data_processed_mib == pytest.approx(1024 + 512 + 256 + 128 + 64 + 32)


@settings(max_examples=60, deadline=None)
@given(
    memory_mib=st.integers(min_value=64, max_value=16 * 1024),
    bandwidth=st.floats(min_value=10, max_value=10_000),
    dirty_share=st.floats(min_value=0, max_value=2),  # dirty rate as a share of the bandwidth
    disk_gib=st.integers(min_value=0, max_value=4),
    step_share=st.floats(min_value=0.01, max_value=1),  # data per step as a share of the first pass
)
def test_pre_copy_arithmetic(
    memory_mib: int, bandwidth: float, dirty_share: float, disk_gib: int, step_share: float
) -> None:
    world = SimCloud()
    world.add_host("a", vcpus=1, memory_mib=1024)
    world.add_host("b", vcpus=1, memory_mib=1024)
    source, target = world.host_by_uri("sim://a"), world.host_by_uri("sim://b")
    assert source is not None and target is not None
    disks = (DiskCopy("sim://local/d", "local", "d", disk_gib, ""),) if disk_gib else ()
    migration = Migration(
        domain="d",
        vm_uid="u",
        source=source,
        target=target,
        bandwidth_mib_s=bandwidth,
        memory_mib=float(memory_mib),
        disks=disks,
        fault=None,
    )
    first_pass = disk_gib * 1024 + memory_mib
    step_s = step_share * first_pass / bandwidth
    dirty_rate = bandwidth * dirty_share
    converges = dirty_share <= 0.9
    converged = False
    # a converging run sends at most 10 first passes (ratio 0.9): 1000 steps are plenty
    for _ in range(2000 if converges else 30):
        converged = migration.advance(step_s, dirty_rate)
        if converged:
            break
        job = migration.job()
        assert job.data_total_mib == pytest.approx(job.data_processed_mib + job.data_remaining_mib)
        assert job.data_remaining_mib >= 0
    if converges:
        assert converged
        # every pass after the first resends what was dirtied: at most a geometric series
        most = first_pass + memory_mib * dirty_share / (1 - dirty_share)
        assert first_pass * (1 - 1e-9) <= migration.processed_mib <= most * (1 + 1e-9)
    elif dirty_share >= 1.01:
        assert not converged  # the guest dirties memory faster than the link sends it
