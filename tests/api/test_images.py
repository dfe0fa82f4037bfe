"""The image library through the real app, as each role (DESIGN.md §8, issue 11 part 1).

An operator never names a path on a hypervisor host: every escape the issue lists
is refused with a 4xx and a reason before anything is written or any driver is
called. Volumes are files virtplane makes itself (named by uid): a file already in
the pool under the Volume's name is never adopted, and deleting the Volume leaves it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer
from virtplane.drivers.sim import SimCloud

SECRET = "root:$y$not-for-guests"  # what a host file outside the library holds


def wait(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"not reached within {timeout}s: {last!r}")


def phase(client: httpx.Client, plural: str, name: str) -> str:
    return str(client.get(f"/v1/{plural}/{name}").json()["status"]["phase"])


def manifest(resource: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": resource, "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def library(live_server: LiveServer) -> Iterator[LiveServer]:
    """A host, a volume pool with a file virtplane did not make, and a library with three images."""
    sim = live_server.plane.sim
    assert isinstance(sim, SimCloud)
    # an admin's files, placed before the pools exist (the simulator is driven from the server's loop)
    sim.put_image_file("lib", "disk.qcow2", "golden", size_gib=2)
    sim.put_image_file("lib", "vmlinuz", "kernel")
    sim.put_image_file("lib", "initrd.gz", "initrd")
    sim.put_image_file("vols", "data-1", SECRET)  # someone else's file in the volume pool
    with live_server.client("admin") as admin:
        for doc in (
            manifest("Host", "h1", uri="sim://h1", cluster="c1"),
            manifest("StoragePool", "vols", kind="shared", cluster="c1", capacity_gib=100),
            manifest("StoragePool", "lib", kind="shared", cluster="c1", capacity_gib=100, content="images"),
            manifest("Image", "disk", pool="lib", file="disk.qcow2", kind="Disk"),
            manifest("Image", "kernel", pool="lib", file="vmlinuz", kind="Kernel"),
            manifest("Image", "initrd", pool="lib", file="initrd.gz", kind="Initrd"),
            manifest("Image", "ghost", pool="lib", file="missing.qcow2", kind="Disk"),
        ):
            created = admin.post(f"/v1/{_plural(doc['kind'])}", json=doc)
            assert created.status_code == 201, created.text
        for image in ("disk", "kernel", "initrd"):
            wait(lambda image=image: phase(admin, "images", image) == "Ready")
        wait(lambda: phase(admin, "images", "ghost") == "Failed")
    yield live_server


def _plural(kind: str) -> str:
    return {"Host": "hosts", "StoragePool": "storagepools", "Image": "images"}[kind]


VOLUME_ESCAPES = [
    # (what the issue tried, spec.source.image, reason)
    ("a root-only file", "/etc/shadow", "Invalid"),
    ("the server's admin token", "/var/lib/virtplane/data/admin.token", "Invalid"),
    ("a block device", "/dev/loop0", "Invalid"),
    ("the host disk", "/dev/vda", "Invalid"),
    ("a path with ..", "../../etc/shadow", "Invalid"),
    ("a library path with ..", "lib/../../etc/shadow", "Invalid"),
    ("a relative path", "images/disk.qcow2", "Invalid"),
    ("a file name instead of an image", "disk.qcow2", "Invalid"),
    ("a URL", "file:///etc/shadow", "Invalid"),
    ("an image that does not exist", "nothing", "ImageNotFound"),
    ("an image whose file is missing", "ghost", "ImageNotReady"),
    ("a kernel as a disk", "kernel", "WrongImageKind"),
]


@pytest.mark.parametrize(("what", "source", "reason"), VOLUME_ESCAPES, ids=[e[0] for e in VOLUME_ESCAPES])
def test_volume_sources_outside_the_library_are_refused(
    library: LiveServer, what: str, source: str, reason: str
) -> None:
    sim = library.plane.sim
    before = sorted(sim.storage.find_pool("", "vols").volumes)
    with library.client("operator") as operator:
        doc = manifest("Volume", "stolen", pool="vols", size_gib=1, source={"image": source})
        refused = operator.post("/v1/volumes", json=doc)
        assert refused.status_code == 422, (what, refused.text)
        assert refused.json()["reason"] == reason, (what, refused.json())
        assert "spec.source.image" in refused.json()["message"]
        if source.startswith("/"):  # a path that exists and one that does not get the same answer
            other = operator.post(
                "/v1/volumes", json={**doc, "spec": {**doc["spec"], "source": {"image": "/no/such"}}}
            )
            assert other.json()["message"] == refused.json()["message"].replace(source, "/no/such")
        assert operator.get("/v1/volumes/stolen").status_code == 404  # nothing written
    assert sorted(sim.storage.find_pool("", "vols").volumes) == before  # no driver call


BOOT_ESCAPES = [
    ({"kernel": "/etc/shadow"}, "Invalid"),
    ({"kernel": "kernel", "initrd": "/etc/shadow"}, "Invalid"),
    ({"kernel": "/var/lib/virtplane/data/admin.token"}, "Invalid"),
    ({"kernel": "../vmlinuz"}, "Invalid"),
    ({"kernel": "nothing"}, "ImageNotFound"),
    ({"kernel": "disk"}, "WrongImageKind"),
    ({"kernel": "kernel", "initrd": "kernel"}, "WrongImageKind"),
    ({"kernel": "ghost"}, "WrongImageKind"),
]


@pytest.mark.parametrize(("boot", "reason"), BOOT_ESCAPES)
def test_boot_files_outside_the_library_are_refused(
    library: LiveServer, boot: dict[str, str], reason: str
) -> None:
    with library.client("operator") as operator:
        refused = operator.post("/v1/vms", json=manifest("VirtualMachine", "peek", boot=boot))
        assert refused.status_code == 422, refused.text
        assert refused.json()["reason"] == reason
        assert operator.get("/v1/vms/peek").status_code == 404
        # nor through an update of a VM that exists
        assert operator.post("/v1/vms", json=manifest("VirtualMachine", "plain")).status_code == 201
        patched = operator.patch("/v1/vms/plain", json={"spec": {"boot": boot}})
        assert patched.status_code == 422 and patched.json()["reason"] == reason
        assert operator.get("/v1/vms/plain").json()["spec"]["boot"] is None


def test_only_an_admin_manages_the_library(library: LiveServer) -> None:
    image = manifest("Image", "mine", pool="lib", file="vmlinuz", kind="Kernel")
    library_pool = manifest(
        "StoragePool", "lib2", kind="shared", cluster="c1", capacity_gib=1, content="images"
    )
    with library.client("operator") as operator:
        assert operator.post("/v1/images", json=image).json()["reason"] == "Forbidden"
        assert operator.post("/v1/storagepools", json=library_pool).status_code == 403
        assert operator.delete("/v1/images/kernel").status_code == 403
        assert operator.get("/v1/images/kernel").json()["status"]["phase"] == "Ready"  # but reads it
        # a volume pool's content cannot be switched by an operator either
        assert (
            operator.patch("/v1/storagepools/vols", json={"spec": {"content": "images"}}).status_code == 403
        )
    with library.client("admin") as admin:
        for bad_file in ("/etc/shadow", "../x", "a/b", ".."):
            doc = manifest("Image", "bad", pool="lib", file=bad_file, kind="Disk")
            refused = admin.post("/v1/images", json=doc)
            assert refused.status_code == 422 and refused.json()["reason"] == "Invalid", bad_file
        wrong_pool = admin.post(
            "/v1/images", json=manifest("Image", "x", pool="vols", file="data-1", kind="Disk")
        )
        assert wrong_pool.json()["reason"] == "NotAnImageLibrary"
        switched = admin.patch("/v1/storagepools/vols", json={"spec": {"content": "images"}})
        assert switched.status_code == 422 and switched.json()["reason"] == "Immutable"
        overlap = manifest(
            "StoragePool",
            "lib3",
            kind="shared",
            cluster="c1",
            capacity_gib=1,
            content="images",
            driver_pool="vols",
        )
        assert admin.post("/v1/storagepools", json=overlap).json()["reason"] == "PoolOverlap"
        changed = admin.patch("/v1/images/kernel", json={"spec": {"file": "initrd.gz"}})
        assert changed.status_code == 422 and changed.json()["reason"] == "Immutable"
        into_library = manifest("Volume", "v", pool="lib", size_gib=1)
    with library.client("operator") as operator:
        assert operator.post("/v1/volumes", json=into_library).json()["reason"] == "PoolIsImageLibrary"


def test_a_volume_named_like_an_existing_file_never_adopts_or_deletes_it(library: LiveServer) -> None:
    sim = library.plane.sim
    with library.client("operator") as operator:
        created = operator.post("/v1/volumes", json=manifest("Volume", "data-1", pool="vols", size_gib=1))
        assert created.status_code == 201, created.text
        wait(lambda: phase(operator, "volumes", "data-1") == "Ready")
        volume = operator.get("/v1/volumes/data-1").json()
        assert volume["status"]["file"] == f"vp-{volume['metadata']['uid']}"
        assert volume["status"]["path"] == f"sim://vols/vp-{volume['metadata']['uid']}"
        assert sim.read_volume(volume["status"]["path"]) == ""  # a new, empty disk
        assert sim.read_volume("sim://vols/data-1") == SECRET
        assert operator.delete("/v1/volumes/data-1").status_code == 200
        wait(lambda: operator.get("/v1/volumes/data-1").status_code == 404)
    files = sim.storage.find_pool("", "vols").volumes
    assert "data-1" in files and sim.read_volume("sim://vols/data-1") == SECRET
    assert f"vp-{volume['metadata']['uid']}" not in files


def test_operators_use_images_by_name(library: LiveServer) -> None:
    sim = library.plane.sim
    with library.client("operator") as operator:
        doc = manifest("Volume", "root", pool="vols", size_gib=1, source={"image": "disk"})
        assert operator.post("/v1/volumes", json=doc).status_code == 201
        wait(lambda: phase(operator, "volumes", "root") == "Ready")
        root = operator.get("/v1/volumes/root").json()
        assert sim.read_volume(root["status"]["path"]) == "golden"
        assert root["status"]["size_gib"] == 2  # at least the image's size
        vm = manifest(
            "VirtualMachine",
            "booted",
            run_policy="AlwaysOn",
            disks=[{"volume": "root", "boot_order": 1}],
            boot={"kernel": "kernel", "initrd": "initrd", "cmdline": "console=ttyS0"},
        )
        assert operator.post("/v1/vms", json=vm).status_code == 201
        wait(lambda: phase(operator, "vms", "booted") == "Running")
    with library.client("admin") as admin:
        in_use = admin.delete("/v1/images/kernel")
        assert in_use.status_code == 409 and in_use.json()["reason"] == "ImageInUse"
        assert "booted" in in_use.json()["message"]
        assert admin.delete("/v1/storagepools/lib").json()["reason"] == "PoolInUse"
        assert admin.delete("/v1/images/ghost").status_code == 200  # nobody uses it


def test_a_failed_image_says_why_without_naming_anything_outside_the_library(library: LiveServer) -> None:
    with library.client("viewer") as viewer:
        ghost = viewer.get("/v1/images/ghost").json()
    assert ghost["status"]["phase"] == "Failed"
    assert (
        ghost["status"]["message"]
        == "on host h1: image file missing.qcow2 in library pool lib does not exist"
    )
