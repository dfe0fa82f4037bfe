"""Hot-plug on real libvirt + QEMU (issue 32, item 4): an operator adds a disk and a NIC to a
running guest through the VM's spec and takes them out again; the guest sees each change (the
test guest prints ``DEVICES disks=... nics=...`` whenever its block devices or interfaces
change) and never restarts (its console says GUEST-UP once). The NIC is on a bridge network
inside a network namespace this module creates (as test_network_qemu does), with its address
from IPAM, and the guest's seed CD-ROM then holds the seed with both NICs.
"""

from __future__ import annotations

import subprocess
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import eventually
from virtplane.controllers.seed import vm_seed
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.networks import Network
from virtplane.domain.resources import MigrateSpec, OperationType, VMPhase, Volume
from virtplane.drivers.base import DomainEvent, DomainEventType

from .conftest import Rig, console_shows, require_prerequisites, running_rig
from .plane import LIMIT_S, SHARED, QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

BRIDGE = "vphp0"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    """This module's daemons, inside a fresh network namespace with one bridge (no route out)."""
    require_prerequisites()
    netns = f"vp-hp-{uuid.uuid4().hex[:8]}"
    try:
        _ip("netns", "add", netns)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"cannot create a network namespace: {exc}")
    try:
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", netns, "link", "add", "vphp1", "type", "veth", "peer", "name", "vphp2")
        _ip("-n", netns, "link", "set", "vphp1", "master", BRIDGE, "up")
        _ip("-n", netns, "link", "set", "vphp2", "up")
        _ip("-n", netns, "link", "set", BRIDGE, "up")
        with running_rig(netns) as started:
            yield started
    finally:
        _ip("netns", "del", netns)


def _network(subnet: str) -> dict[str, Any]:
    return {"kind": "bridge", "bridge": BRIDGE, "cluster": "default", "subnet": subnet}


async def _settled(qplane: QemuPlane) -> None:
    """The running domain has the devices of the VM's current spec."""

    def check() -> bool:
        vm = qplane.vm("web")
        ready = get_condition(vm.status.conditions, VMCondition.DEVICES_READY)
        return (
            ready is not None
            and ready.status.value == "True"
            and vm.status.devices_generation == vm.metadata.generation
        )

    await eventually(check, timeout=LIMIT_S)


async def _running_web(qplane: QemuPlane, api: Any, cmdline: str = "") -> dict[str, Any]:
    """VM web on host a with its root disk and one NIC on lan, running; returns that NIC."""
    await qplane.add_host("a")
    await qplane.add_volume("web-root", SHARED)
    for name, subnet in (("lan", "10.79.0.0/24"), ("lan2", "10.80.0.0/24")):
        doc = {"metadata": {"name": name}, "spec": _network(subnet)}
        assert (await api.post("/v1/networks", json=doc)).status_code == 201
    boot = {"kernel": "guest-kernel", "initrd": "guest-initrd", "cmdline": f"console=ttyS0 quiet {cmdline}"}
    vm = {
        "metadata": {"name": "web"},
        "spec": {
            "run_policy": "Manual",
            "memory_mib": 192,
            "disks": [{"volume": "web-root"}],
            "boot": boot,
            "nics": [{"network": "lan"}],
            "cloud_init": {},
        },
    }
    created = await api.post("/v1/vms", json=vm)
    assert created.status_code == 201, created.text
    await qplane.operate("web", OperationType.START)
    await qplane.wait_settled("web", VMPhase.RUNNING)
    await console_shows(qplane.rig, qplane.domain("web"), "DEVICES disks=vda nics=eth0", limit_s=LIMIT_S)
    nic: dict[str, Any] = created.json()["spec"]["nics"][0]
    return nic


async def _plug_in_a_disk_and_a_nic(
    qplane: QemuPlane, api: Any, first: dict[str, Any]
) -> tuple[Volume, dict[str, Any]]:
    """A data disk and a NIC on lan2 added to the running guest's spec, seen by the guest and
    settled; the volume and the new NIC as the API filled it in."""
    data = await qplane.add_volume("web-data", SHARED)
    both = {"disks": [{"volume": "web-root"}, {"volume": "web-data"}], "nics": [first, {"network": "lan2"}]}
    added = await api.patch("/v1/vms/web", json={"spec": both})
    assert added.status_code == 200, added.text
    second: dict[str, Any] = added.json()["spec"]["nics"][1]
    await console_shows(
        qplane.rig, qplane.domain("web"), "DEVICES disks=vda,vdb nics=eth0,eth1", limit_s=LIMIT_S
    )
    await _settled(qplane)
    return data, second


async def test_a_disk_and_a_nic_hot_plugged_into_a_running_guest_and_out_again(qplane: QemuPlane) -> None:
    async with qplane.api() as api:
        first = await _running_web(qplane, api)
        domain = qplane.domain("web")
        data, second = await _plug_in_a_disk_and_a_nic(qplane, api, first)
        xml = ET.fromstring(
            await qplane.drivers["a"]._call(lambda conn: conn.lookupByName(domain).XMLDesc(0))
        )
        assert data.status.path in [s.get("file") for s in xml.iterfind("devices/disk/source")]
        assert second["mac"] in [m.get("address") for m in xml.iterfind("devices/interface/mac")]
        persistent = await qplane.drivers["a"]._call(lambda conn: conn.lookupByName(domain).XMLDesc(2))
        assert data.status.path in persistent and second["mac"] in persistent, "the definition agrees"
        networks = {n.metadata.name: n for n in qplane.store.list_objects(Network)}
        wanted = vm_seed(qplane.vm("web"), networks)
        assert wanted is not None and second["mac"].encode() in wanted.documents["network-config"]
        cdrom = next(d for d in xml.iterfind("devices/disk") if d.get("device") == "cdrom")
        source = cdrom.find("source")
        assert source is not None and source.get("file", "").endswith(wanted.file_name), "the new seed"

        events: list[DomainEvent] = []  # what libvirt says on another connection to the host
        qplane.drivers["a"].set_event_sink(events.append)
        out = {"disks": [{"volume": "web-root"}], "nics": [first]}
        assert (await api.patch("/v1/vms/web", json={"spec": out})).status_code == 200
        await console_shows(qplane.rig, domain, "DEVICES disks=vda nics=eth0", count=2, limit_s=LIMIT_S)
        await _settled(qplane)
        await eventually(lambda: qplane.store.get(type(data), "web-data").status.attached_vm is None)
        removed = [
            e.detail for e in events if e.type is DomainEventType.DEVICE_REMOVED and e.domain == domain
        ]
        assert len(removed) == 2, removed  # the guest released the disk and the NIC, by alias

    log = qplane.console("web")
    assert log.count("GUEST-UP") == 1, "the guest never restarted"
    assert qplane.vm("web").status.phase is VMPhase.RUNNING
    reasons = [reason for reason, _ in qplane.events("web")]
    assert reasons.count("Attached") == 2 and reasons.count("Detached") == 2, reasons


async def test_a_guest_that_reboots_after_a_hot_plug_reads_the_new_nic_from_its_seed(
    qplane: QemuPlane,
) -> None:
    """The seed CD-ROM's media was changed while the guest ran: its reboot (a reset, the same
    QEMU process with the hot-plugged NIC) configures the new NIC from the seed, by its MAC."""
    async with qplane.api() as api:
        first = await _running_web(qplane, api, "vp.reboot=20")  # reboots after 40 s, each boot
        added = await api.patch("/v1/vms/web", json={"spec": {"nics": [first, {"network": "lan2"}]}})
        assert added.status_code == 200, added.text
        second = added.json()["spec"]["nics"][1]
        await _settled(qplane)
        assert "GUEST-REBOOT" not in qplane.console("web"), "the NIC came before the reboot"
        await console_shows(qplane.rig, qplane.domain("web"), "GUEST-UP", count=2, limit_s=LIMIT_S)
    log = qplane.console("web")
    rebooted = log[log.index("GUEST-REBOOT") :]
    assert f"{second['ip']}/24 via - mac {second['mac']}" in rebooted, rebooted[:2000]
    assert f"{first['ip']}/24 via - mac {first['mac']}" in rebooted


async def test_hot_plugged_devices_live_migrate_with_the_guest_and_detach_on_the_target(
    qplane: QemuPlane,
) -> None:
    async with qplane.api() as api:
        first = await _running_web(qplane, api)
        domain = qplane.domain("web")
        data, second = await _plug_in_a_disk_and_a_nic(qplane, api, first)

        await qplane.add_host("b")
        await qplane.operate("web", OperationType.MIGRATE, migrate=MigrateSpec(target_host="b"))
        assert await qplane.runs_on("web") == ["b"]
        for flags in (0, 2):  # the live definition on b, and the persistent one
            xml = await qplane.drivers["b"]._call(lambda conn, f=flags: conn.lookupByName(domain).XMLDesc(f))
            assert data.status.path in xml and second["mac"] in xml, flags

        out = {"disks": [{"volume": "web-root"}], "nics": [first]}
        assert (await api.patch("/v1/vms/web", json={"spec": out})).status_code == 200
        await console_shows(qplane.rig, domain, "DEVICES disks=vda nics=eth0", count=2, limit_s=LIMIT_S)
        await _settled(qplane)
        persistent = await qplane.drivers["b"]._call(lambda conn: conn.lookupByName(domain).XMLDesc(2))
        assert data.status.path not in persistent and second["mac"] not in persistent, "the definition agrees"
    assert qplane.console("web").count("GUEST-UP") == 1
