"""Installs from an ISO (issue 34, item 2): an uploaded Image of kind Iso as a VM's CD-ROM.

``spec.cdrom`` names an Iso image; the domain gets it read-only, tried after the disks (an
empty disk falls through to it); taking it out of the spec detaches it at the next start.
Over the simulator (the domain's definition as the simulated host keeps it) and libvirt's
test driver (the domain XML libvirt keeps).
"""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_image_upload import ISO, QCOW2, upload
from tests.api.test_images import manifest, phase, wait
from tests.conftest import LiveServer, libvirt_or_skip, wait_json
from tests.drivers.conftest import write_node_xml
from virtplane.drivers.base import domain_name


def make_world(admin: httpx.Client, uris: dict[str, str], library_path: str) -> None:
    """Hosts of cluster c1, a library ``lib`` with the Iso ``installer`` and the disk ``golden``
    uploaded, a volume pool and an empty disk ``root``."""
    for name, uri in uris.items():
        assert admin.post("/v1/hosts", json=manifest("Host", name, uri=uri, cluster="c1")).status_code == 201
    pools = (
        manifest(
            "StoragePool",
            "lib",
            kind="shared",
            cluster="c1",
            capacity_gib=100,
            content="images",
            path=library_path,
        ),
        manifest("StoragePool", "vols", kind="shared", cluster="c1", capacity_gib=100),
    )
    for doc in pools:
        assert admin.post("/v1/storagepools", json=doc).status_code == 201, doc
    for name in uris:
        wait(lambda name=name: admin.get(f"/v1/hosts/{name}").json()["status"]["connection"] == "Up")
    assert upload(admin, "installer", ISO, kind="Iso").status_code == 201
    assert upload(admin, "golden", QCOW2).status_code == 201
    for image in ("installer", "golden"):
        wait(lambda image=image: phase(admin, "images", image) == "Ready")
    assert (
        admin.post("/v1/volumes", json=manifest("Volume", "root", pool="vols", size_gib=1)).status_code == 201
    )


def installing_vm(name: str = "fresh", **spec: Any) -> dict[str, Any]:
    return manifest(
        "VirtualMachine", name, run_policy="AlwaysOn", memory_mib=256, disks=[{"volume": "root"}],
        cdrom="installer", **spec,
    )  # fmt: skip


@pytest.fixture
def sim_world(live_server: LiveServer) -> Iterator[LiveServer]:
    with live_server.client("admin") as admin:
        make_world(admin, {"h1": "sim://h1", "h2": "sim://h2"}, "/srv/lib")
    yield live_server


def test_a_vm_boots_an_installer_iso_after_its_empty_disk_then_runs_without_it(sim_world: LiveServer) -> None:
    sim = sim_world.plane.sim
    assert sim is not None
    with sim_world.client("operator") as operator:
        assert operator.post("/v1/vms", json=installing_vm()).status_code == 201
        vm = wait_json(operator, "/v1/vms/fresh", lambda v: v["status"]["phase"] == "Running")
        domain = sim.host_named(vm["status"]["host"]).domains[domain_name(vm["metadata"]["uid"])]
        assert domain.spec.cdrom is not None
        assert (domain.spec.cdrom.file, domain.spec.cdrom.format) == ("vp-image-installer.iso", "iso")
        # the install is done: the CD-ROM leaves the spec, and the next start has none
        patched = operator.patch("/v1/vms/fresh", json={"spec": {"cdrom": None}})
        assert patched.status_code == 200, patched.text
        restart = manifest("VirtualMachineOperation", "reboot-fresh", vm="fresh", type="Restart")
        assert operator.post("/v1/operations", json=restart).status_code == 201
        wait(lambda: _defined_cdrom(sim_world, "fresh") is None)
        wait_json(operator, "/v1/vms/fresh", lambda v: v["status"]["phase"] == "Running")


def _defined_cdrom(server: LiveServer, vm_name: str) -> Any:
    with server.client("admin") as admin:
        vm = admin.get(f"/v1/vms/{vm_name}").json()
    sim = server.plane.sim
    assert sim is not None and vm["status"]["host"]
    domain = sim.host_named(vm["status"]["host"]).domains.get(domain_name(vm["metadata"]["uid"]))
    return "missing" if domain is None else domain.spec.cdrom


CDROM_REFUSALS = [
    ("nothing", "ImageNotFound"),
    ("golden", "WrongImageKind"),  # a disk image is no installer
    ("Not_A_Name", "Invalid"),
    ("/srv/lib/vp-image-installer.iso", "Invalid"),  # a path, never
]


@pytest.mark.parametrize(("cdrom", "reason"), CDROM_REFUSALS, ids=[c[0] for c in CDROM_REFUSALS])
def test_a_cdrom_that_is_no_ready_iso_image_is_refused(
    sim_world: LiveServer, cdrom: str, reason: str
) -> None:
    with sim_world.client("operator") as operator:
        refused = operator.post("/v1/vms", json=installing_vm(name="bad") | {"spec": {"cdrom": cdrom}})
        assert (refused.status_code, refused.json()["reason"]) == (422, reason), refused.text
        assert operator.get("/v1/vms/bad").status_code == 404


def test_an_iso_in_use_as_a_cdrom_cannot_be_deleted(sim_world: LiveServer) -> None:
    with sim_world.client("operator") as operator:
        assert operator.post("/v1/vms", json=installing_vm()).status_code == 201
    with sim_world.client("admin") as admin:
        refused = admin.delete("/v1/images/installer")
        assert (refused.status_code, refused.json()["reason"]) == (409, "ImageInUse")
        assert "fresh" in refused.json()["message"]


def test_libvirts_test_driver_gets_the_cdrom_with_its_boot_order(
    live_server: LiveServer, tmp_path: Path
) -> None:
    """Two test-driver hosts: the upload makes the library file on both through libvirt (the
    test driver keeps no contents, so the server's own check of the bytes is what holds), and
    the domain XML libvirt keeps has the CD-ROM read-only, after the disk."""
    libvirt_or_skip()
    uris = {name: write_node_xml(tmp_path / f"{name}.xml") for name in ("kvm-a", "kvm-b")}
    with live_server.client("admin") as admin:
        make_world(admin, uris, str(tmp_path / "library"))
        assert admin.get("/v1/images/installer").json()["status"]["hosts"] == ["kvm-a", "kvm-b"]
        assert admin.post("/v1/vms", json=installing_vm()).status_code == 201
        vm = wait_json(admin, "/v1/vms/fresh", lambda v: v["status"]["phase"] == "Running")
    driver = _driver(live_server, uris[vm["status"]["host"]])
    xml = _call(
        live_server, driver, lambda conn: conn.lookupByName(domain_name(vm["metadata"]["uid"])).XMLDesc(0)
    )
    disks = ET.fromstring(xml).findall("devices/disk")
    boot = {d.get("device"): (d.find("source").get("file"), d.find("boot").get("order")) for d in disks}  # type: ignore[union-attr]
    assert boot["cdrom"] == (str(tmp_path / "library" / "vp-image-installer.iso"), "2")
    assert boot["disk"][1] == "1"
    cdrom = next(d for d in disks if d.get("device") == "cdrom")
    assert cdrom.find("readonly") is not None


def _driver(server: LiveServer, uri: str) -> Any:
    return asyncio.run_coroutine_threadsafe(server.plane.hosts.get(uri), server.loop).result(10)


def _call(server: LiveServer, driver: Any, fn: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(driver._call(fn), server.loop).result(10)
