"""Issue 11 part 1 on real libvirt + QEMU: an operator cannot read the hypervisor's files.

The control plane manages the rig's daemons; every request goes through the real
app (ASGI) with an operator's token, as the issue's report did. Each escape it
lists is tried and refused: paths as a volume's source image or as boot files,
library files that are links out of the library or devices, a volume named like a
file already in its pool, and a guest reaching a service on the host's 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.domain.resources import Metadata, PoolKind, StoragePool, StoragePoolSpec
from virtplane.store.store import Store

from .conftest import Rig, console_shows
from .plane import LIMIT_S, SHARED, QemuPlane, add_guest_images, guest_images_ready

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

SECRET = "root:$y$j9T$secret-hash:19000:0:99999:7:::"


@pytest.fixture
async def api(
    store: Store, rig: Rig, drivers: dict[str, Any]
) -> AsyncIterator[tuple[QemuPlane, httpx.AsyncClient, httpx.AsyncClient]]:
    """The control plane on the rig (host a), and the API as an operator and as an admin."""
    plane = ControlPlane(store, options=ControlPlaneOptions(workers=4, console_dir=str(rig.console_dir)))
    qemu = QemuPlane(plane, rig, drivers)
    shared = StoragePoolSpec(
        kind=PoolKind.SHARED, cluster="default", path=rig.shared_pool.path, capacity_gib=100
    )
    store.create(StoragePool(metadata=Metadata(name=SHARED), spec=shared))
    add_guest_images(store, rig)
    await plane.start()
    app = plane.app()  # its lifespan is not run: the plane is started here
    transport = httpx.ASGITransport(app=app)
    tokens = {role: store.create_token(f"sec-{role}", role) for role in ("operator", "admin")}
    clients = [
        httpx.AsyncClient(
            transport=transport, base_url="http://api", headers={"Authorization": f"Bearer {tokens[role]}"}
        )
        for role in ("operator", "admin")
    ]
    try:
        await qemu.add_host("a")
        await guest_images_ready(store)
        yield qemu, clients[0], clients[1]
    finally:
        for client in clients:
            await client.aclose()
        await plane.stop()
        await qemu.cleanup()


def doc(resource: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": resource, "metadata": {"name": name}, "spec": spec}


async def phase_of(client: httpx.AsyncClient, plural: str, name: str) -> str:
    return str((await client.get(f"/v1/{plural}/{name}")).json()["status"]["phase"])


async def wait_phase(client: httpx.AsyncClient, plural: str, name: str, phase: str) -> dict[str, Any]:
    async def probe() -> bool:
        return await phase_of(client, plural, name) == phase

    deadline = asyncio.get_running_loop().time() + LIMIT_S
    while not await probe():
        assert asyncio.get_running_loop().time() < deadline, (plural, name, phase)
        await asyncio.sleep(0.1)
    return dict((await client.get(f"/v1/{plural}/{name}")).json())


@pytest.fixture
def secret_file(rig: Rig) -> Path:
    """A root-only file outside every pool, standing in for /etc/shadow."""
    path = rig.base / "secret"
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


async def test_paths_as_sources_and_boot_files_are_refused(api: Any, secret_file: Path) -> None:
    _, operator, _ = api
    paths = [
        "/etc/shadow",
        str(secret_file),
        "/var/lib/virtplane/data/admin.token",
        "/dev/loop0",
        "/dev/vda",
        "../../etc/shadow",
        "secret",  # relative: no image has that name
        "library/vmlinuz",
    ]
    for path in paths:
        volume = doc("Volume", "stolen", pool="shared", size_gib=1, source={"image": path})
        refused = await operator.post("/v1/volumes", json=volume)
        assert refused.status_code == 422, (path, refused.text)
        assert refused.json()["reason"] in ("Invalid", "ImageNotFound"), refused.json()
        for boot in ({"kernel": path}, {"kernel": "guest-kernel", "initrd": path}):
            vm = doc("VirtualMachine", "peek", boot=boot)
            refused = await operator.post("/v1/vms", json=vm)
            assert refused.status_code == 422, (boot, refused.text)
    assert (await operator.get("/v1/volumes")).json()["items"] == []
    assert (await operator.get("/v1/vms")).json()["items"] == []


async def test_library_files_that_lead_out_are_refused_and_say_nothing_of_where(
    api: Any, rig: Rig, secret_file: Path
) -> None:
    _, operator, admin = api
    library = rig.base / "library"
    (library / "escape.qcow2").symlink_to(secret_file)
    (library / "escape-rel.qcow2").symlink_to("../secret")
    (library / "loop.raw").symlink_to("/dev/loop0")
    (library / "dir.raw").mkdir()
    for name, file, kind, fmt in (
        ("escape", "escape.qcow2", "Disk", "raw"),
        ("escape-rel", "escape-rel.qcow2", "Disk", "raw"),
        ("loop", "loop.raw", "Disk", "raw"),
        ("dir", "dir.raw", "Disk", "raw"),
        ("shadow-initrd", "escape.qcow2", "Initrd", None),
    ):
        spec: dict[str, Any] = {"pool": "library", "file": file, "kind": kind}
        if fmt:
            spec["format"] = fmt
        assert (await admin.post("/v1/images", json=doc("Image", name, **spec))).status_code == 201
    for name in ("escape", "escape-rel", "loop", "dir", "shadow-initrd"):
        image = await wait_phase(admin, "images", name, "Failed")
        message = image["status"]["message"]
        assert "library pool library" in message, message
        assert "secret" not in message and "/dev" not in message and str(rig.base) not in message, message
    assert "leads out of the library" in (await admin.get("/v1/images/escape")).json()["status"]["message"]
    # the operator cannot use them
    volume = doc("Volume", "stolen", pool="shared", size_gib=1, source={"image": "escape"})
    refused = await operator.post("/v1/volumes", json=volume)
    assert refused.status_code == 422 and refused.json()["reason"] == "ImageNotReady"
    vm = doc("VirtualMachine", "peek", boot={"kernel": "guest-kernel", "initrd": "shadow-initrd"})
    refused = await operator.post("/v1/vms", json=vm)
    assert refused.status_code == 422 and refused.json()["reason"] == "ImageNotReady"
    # the genuine files are fine
    assert (await admin.get("/v1/images/guest-kernel")).json()["status"]["phase"] == "Ready"


async def test_a_file_swapped_for_a_link_after_the_check_is_refused_at_use(
    api: Any, rig: Rig, secret_file: Path
) -> None:
    """Defence in depth: the driver checks the file again right before it copies it."""
    _, operator, admin = api
    image = rig.base / "library" / "base.qcow2"
    before = set(Path(rig.shared_pool.path).glob("vp-*"))  # other tests' volumes may be there
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(image), "64M"], check=True)
    assert (
        await admin.post(
            "/v1/images", json=doc("Image", "base", pool="library", file="base.qcow2", kind="Disk")
        )
    ).status_code == 201
    await wait_phase(admin, "images", "base", "Ready")
    image.unlink()
    image.symlink_to(secret_file)  # after the Image was found Ready
    volume = doc("Volume", "late", pool="shared", size_gib=1, source={"image": "base"})
    assert (await operator.post("/v1/volumes", json=volume)).status_code == 201
    failed = await wait_phase(operator, "volumes", "late", "Failed")
    assert "leads out of the library" in failed["status"]["message"]
    assert set(Path(rig.shared_pool.path).glob("vp-*")) == before  # nothing was copied


async def test_a_volume_named_like_a_file_in_its_pool_does_not_adopt_or_delete_it(api: Any, rig: Rig) -> None:
    _, operator, _ = api
    theirs = Path(rig.shared_pool.path) / "data-1"
    theirs.write_text(SECRET)
    created = await operator.post("/v1/volumes", json=doc("Volume", "data-1", pool="shared", size_gib=1))
    assert created.status_code == 201, created.text
    volume = await wait_phase(operator, "volumes", "data-1", "Ready")
    mine = Path(volume["status"]["path"])
    assert mine.name == f"vp-{volume['metadata']['uid']}" and mine.exists()
    assert (await operator.delete("/v1/volumes/data-1")).status_code == 200

    async def gone() -> bool:
        return (await operator.get("/v1/volumes/data-1")).status_code == 404

    deadline = asyncio.get_running_loop().time() + LIMIT_S
    while not await gone():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    assert not mine.exists()
    assert theirs.read_text() == SECRET  # untouched: virtplane never made it


@pytest.fixture
def loopback_listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP service on the host's 127.0.0.1 (where the control plane listens); records connections."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join(timeout=5)
    server.close()


async def test_a_guest_cannot_reach_the_hosts_loopback(
    api: Any, rig: Rig, loopback_listener: tuple[int, list[str]]
) -> None:
    qemu, operator, _ = api
    port, accepted = loopback_listener
    vm = doc(
        "VirtualMachine",
        "probe",
        run_policy="AlwaysOn",
        memory_mib=192,
        boot={
            "kernel": "guest-kernel",
            "initrd": "guest-initrd",
            # 10.0.2.2 is where QEMU's user network puts the host's 127.0.0.1
            "cmdline": f"console=ttyS0 panic=-1 quiet vp.probe=10.0.2.2:{port}",
        },
    )
    created = await operator.post("/v1/vms", json=vm)
    assert created.status_code == 201, created.text
    await wait_phase(operator, "vms", "probe", "Running")
    console = await console_shows(rig, qemu.domain("probe"), "PROBE ", limit_s=LIMIT_S)
    assert "PROBE connected" not in console
    assert accepted == []
