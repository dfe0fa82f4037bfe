"""The simulator's bridges per host, NICs and seed volumes (issue 14).

A simulated host has the Linux bridges it was given (the demo's, a test's) and reports them
as a libvirt host does; like QEMU, it refuses a NIC on a bridge it lacks. QEMU's user
network is the simulator's alone. All of it outlives the simulator's process.
"""

from __future__ import annotations

import asyncio
import base64
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from tests.drivers.test_sim_persistence import life, make_cloud, make_spec
from virtplane.domain.resources import Capability
from virtplane.drivers.base import NicAttachment, PoolRef, domain_name
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.sim import SimCloud

LAN = NicAttachment(mac="52:54:00:00:00:01", bridge="br0", network="lan")
USER = NicAttachment(mac="52:54:00:00:00:02", bridge=None, network="user")
SHARED = PoolRef(name="shared", path="shared", shared=True, capacity_gib=100)


def test_a_host_reports_its_bridges_refuses_a_nic_on_another_and_offers_a_user_network() -> None:
    async def main() -> None:
        cloud = SimCloud(boot_seconds=0.0, shutdown_seconds=0.0)
        cloud.add_host("h1", vcpus=2, memory_mib=2048, bridges=["br1", "br0", "br0"])
        driver = cloud.driver("sim://h1")
        await driver.connect()
        assert (await driver.host_facts()).bridges == ("br0", "br1")
        assert Capability.USER_NETWORK in driver.capabilities

        await driver.ensure_defined(replace(make_spec("a"), nics=(LAN, USER)))
        elsewhere = replace(LAN, bridge="br9")
        with pytest.raises(PermanentError, match="bridge br9 is not on host h1"):
            await driver.ensure_defined(replace(make_spec("b"), nics=(elsewhere,)))
        cloud.set_bridges("h1", ["br9"])
        assert (await driver.host_facts()).bridges == ("br9",)
        await driver.ensure_defined(replace(make_spec("b"), nics=(elsewhere,)))

    asyncio.run(main())


def test_bridges_nics_and_seeds_outlive_the_process(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"

    async def first() -> None:
        cloud = make_cloud(path)
        cloud.add_host("h1", vcpus=2, memory_mib=2048, bridges=["br0"])
        driver = cloud.driver("sim://h1")
        await driver.connect()
        await driver.ensure_pool(SHARED)
        seed = await driver.upload_volume(SHARED, "vp-seed-1.iso", b"\x00cidata\xff")
        await driver.ensure_defined(replace(make_spec("a"), nics=(LAN,), seed=seed.path))

    life(first)
    cloud = make_cloud(path)
    host = cloud.host_named("h1")
    assert host is not None and host.bridges == ("br0",)
    spec = host.domains[domain_name("a")].spec
    assert spec.nics == (LAN,) and spec.seed == "sim://shared/vp-seed-1.iso"
    assert base64.b64decode(cloud.read_volume(spec.seed)) == b"\x00cidata\xff"


def test_a_state_file_of_version_2_gets_hosts_without_bridges(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    cloud = make_cloud(path)
    cloud.add_host("h1", vcpus=2, memory_mib=2048, bridges=["br0"])
    cloud.close()
    with sqlite3.connect(path) as conn:  # as version 2 wrote it
        conn.execute("ALTER TABLE hosts DROP COLUMN bridges")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")
    cloud = make_cloud(path)
    host = cloud.host_named("h1")
    assert host is not None and host.bridges == ()
    cloud.set_bridges("h1", ["br1"])
    cloud.close()
    host = make_cloud(path).host_named("h1")
    assert host is not None and host.bridges == ("br1",)
