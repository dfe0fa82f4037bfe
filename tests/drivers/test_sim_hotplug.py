"""Hot-plug on the simulator, as libvirt and QEMU do it (issue 32, item 4): an attach is there at
once, in the running instance and the definition; a detach leaves the definition at once and
the running instance only once the guest released the device (``detach_seconds`` later on
the simulator's clock, never after an ``ignore-unplug`` fault); QEMU's refusals are its
refusals (a bridge the host lacks, a disk it does not see, a domain that is not running)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.drivers.test_sim_persistence import make_spec
from virtplane.domain.resources import Capability
from virtplane.drivers.base import DiskAttachment, LiveDevices, NicAttachment, PoolRef, domain_name
from virtplane.drivers.errors import NotRunning, PermanentError
from virtplane.drivers.sim import SimCloud

SHARED = PoolRef(name="shared", path="shared", shared=True, capacity_gib=100)
LAN = NicAttachment(mac="52:54:00:00:00:01", bridge="br0", network="lan")
LAN2 = NicAttachment(mac="52:54:00:00:00:02", bridge="br0", network="lan")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_attach_is_immediate_detach_waits_for_the_guest_and_refusals_are_qemus() -> None:
    async def main() -> None:
        clock = Clock()
        cloud = SimCloud(boot_seconds=0.0, shutdown_seconds=0.0, clock=clock, detach_seconds=2.0)
        cloud.add_host("h1", vcpus=2, memory_mib=2048, bridges=["br0"])
        cloud.add_host("h2", vcpus=2, memory_mib=2048)
        driver = cloud.driver("sim://h1")
        await driver.connect()
        assert Capability.HOTPLUG in driver.capabilities
        await driver.ensure_pool(SHARED)
        root = await driver.create_volume(SHARED, "root", 1)
        data = await driver.create_volume(SHARED, "data", 1)
        name = domain_name("a")
        spec = replace(make_spec("a", disks=(root.path,)), nics=(LAN,))
        await driver.ensure_defined(spec)
        with pytest.raises(NotRunning):
            await driver.attach_disk(name, DiskAttachment(path=data.path))
        assert await driver.live_devices(name) is None
        await driver.start(name)
        assert await driver.live_devices(name) == LiveDevices((root.path,), (LAN.mac,))

        await driver.attach_disk(name, DiskAttachment(path=data.path, volume="data"))
        await driver.attach_nic(name, LAN2)
        await driver.attach_nic(name, LAN2)  # again: a no-op
        assert await driver.live_devices(name) == LiveDevices((root.path, data.path), (LAN.mac, LAN2.mac))

        await driver.detach_disk(name, data.path)
        await driver.detach_nic(name, LAN2.mac)
        # asked, not released yet: the guest has it until it lets go
        assert await driver.live_devices(name) == LiveDevices((root.path, data.path), (LAN.mac, LAN2.mac))
        clock.now += 2.0
        assert await driver.live_devices(name) == LiveDevices((root.path,), (LAN.mac,))
        infos = {info.name: info for info in await driver.list_domains()}
        assert infos[name].state.value == "running", "no restart"

        # a guest that ignores the request keeps the device for ever
        await driver.attach_disk(name, DiskAttachment(path=data.path))
        cloud.inject("h1", "ignore-unplug", name)
        await driver.detach_disk(name, data.path)
        clock.now += 3600
        assert await driver.live_devices(name) == LiveDevices((root.path, data.path), (LAN.mac,))

        with pytest.raises(PermanentError, match="bridge br9 is not on host h1"):
            await driver.attach_nic(name, replace(LAN2, bridge="br9"))
        with pytest.raises(PermanentError, match="no such file on host h1"):
            await driver.attach_disk(name, DiskAttachment(path="sim://elsewhere/x"))

    asyncio.run(main())
