"""The simulator's usage (``SimDriver.usage``): counters that grow with the guest's set load,
from zero with each new process, and nothing for a stopped domain."""

from __future__ import annotations

import pytest

from virtplane.drivers.base import DiskAttachment, DomainSpec, NicAttachment, domain_name
from virtplane.drivers.sim import SimCloud, SimLoad
from virtplane.drivers.stats import UsageSample


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spec(uid: str = "vm1") -> DomainSpec:
    return DomainSpec(
        name=domain_name(uid),
        vm_name=uid,
        vm_uid=uid,
        cpu=2,
        memory_mib=1000,
        disks=(DiskAttachment("/p/a.qcow2"), DiskAttachment("/p/b.qcow2")),
        nics=(NicAttachment("52:54:00:00:00:01", None),),
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cloud(clock: Clock) -> SimCloud:
    sim = SimCloud(boot_seconds=0.0, shutdown_seconds=0.0, clock=clock)
    sim.add_host("h1", vcpus=8, memory_mib=8192)
    sim.add_host("h2", vcpus=8, memory_mib=8192)
    return sim


async def _usage(cloud: SimCloud, host: str = "h1") -> UsageSample:
    driver = cloud.driver(f"sim://{host}")
    await driver.connect()
    return await driver.usage()


async def test_counters_grow_with_the_load_set_on_the_guest(cloud: SimCloud, clock: Clock) -> None:
    driver = cloud.driver("sim://h1")
    await driver.connect()
    await driver.ensure_defined(spec())
    await driver.start(domain_name("vm1"))
    cloud.set_load(domain_name("vm1"), SimLoad(cpu=0.5, memory=0.25, disk_write_bps=1e6, net_rx_bps=3000))
    first = (await driver.usage()).domains[0]
    clock.now += 10
    later = (await driver.usage()).domains[0]
    assert later.vm_uid == "vm1" and later.vcpus == 2
    assert later.cpu_time_ns - first.cpu_time_ns == pytest.approx(10e9, rel=1e-6)  # half of 2 vCPUs, 10 s
    assert later.memory_used_mib == 250.0
    assert [d.name for d in later.disks] == ["vda", "vdb"]
    assert later.disks[0].write_bytes - first.disks[0].write_bytes == pytest.approx(1e7, rel=1e-6)
    assert later.disks[0].write_ops > first.disks[0].write_ops
    assert later.nics[0].rx_bytes - first.nics[0].rx_bytes == pytest.approx(30_000, abs=1)
    host = (await driver.usage()).host
    assert host.cpus == 8 and host.memory_total_mib == 8192 and host.load1 == 1.0
    assert 0 < host.cpu_busy_ns < host.cpu_total_ns


async def test_a_stopped_domain_reports_nothing_and_a_restart_counts_from_zero(
    cloud: SimCloud, clock: Clock
) -> None:
    driver = cloud.driver("sim://h1")
    await driver.connect()
    await driver.ensure_defined(spec())
    name = domain_name("vm1")
    await driver.start(name)
    cloud.set_load(name, SimLoad(cpu=1.0))
    await driver.usage()
    clock.now += 100
    assert (await driver.usage()).domains[0].cpu_time_ns == pytest.approx(200e9, rel=1e-6)
    await driver.destroy(name)
    assert (await driver.usage()).domains == ()
    await driver.start(name)
    clock.now += 1
    assert (await driver.usage()).domains[0].cpu_time_ns < 200e9  # a new QEMU process: from zero
