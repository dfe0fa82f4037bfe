"""Images uploaded through the API (issue 34, item 1), over the simulator and the real app.

The server checks the content (length, SHA-256, format) before any host is written, writes
the file into the library through each host's driver, and only then records the Image; a
refused, cut-off or failed upload leaves nothing behind, neither on the hosts nor in the
server's spool directory.
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.test_images import manifest, phase, wait
from tests.conftest import LiveServer
from virtplane.drivers.sim import SimCloud
from virtplane.drivers.sim._storage import WRITTEN_IMAGE

QCOW2 = b"QFI\xfb\x00\x00\x00\x03" + bytes(range(256)) * 64
ISO = bytes(0x8001) + b"CD001" + b"\x01" * 4096
RAW = b"\x00" * 4096


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def libraries(live_server: LiveServer, tmp_path: Path) -> Iterator[LiveServer]:
    """Two hosts of cluster c1, a shared library ``lib`` and a volume pool ``vols``."""
    images = live_server.plane.api_context.images
    assert images is not None
    images.spool_dir = tmp_path / "spool"
    images.spool_dir.mkdir()
    with live_server.client("admin") as admin:
        for doc in (
            manifest("Host", "h1", uri="sim://h1", cluster="c1"),
            manifest("Host", "h2", uri="sim://h2", cluster="c1"),
            manifest("StoragePool", "lib", kind="shared", cluster="c1", capacity_gib=100, content="images"),
            manifest("StoragePool", "vols", kind="shared", cluster="c1", capacity_gib=100),
        ):
            plural = {"Host": "hosts", "StoragePool": "storagepools"}[doc["kind"]]
            assert admin.post(f"/v1/{plural}", json=doc).status_code == 201
        for host in ("h1", "h2"):
            wait(lambda host=host: admin.get(f"/v1/hosts/{host}").json()["status"]["connection"] == "Up")
    yield live_server


def spooled(server: LiveServer) -> list[Path]:
    images = server.plane.api_context.images
    assert images is not None and images.spool_dir is not None
    return list(images.spool_dir.iterdir())


def library_files(server: LiveServer) -> dict[str, str]:
    sim = server.plane.sim
    assert isinstance(sim, SimCloud)
    pool = sim.storage.find_pool("", "lib")
    return {} if pool is None else {name: volume.content for name, volume in pool.volumes.items()}


@contextmanager
def sent_in_part(server: LiveServer, path: str, length: int, body: bytes) -> Iterator[socket.socket]:
    """A PUT to /v1/images/``path`` announcing ``length`` bytes and sending ``body`` (fewer)."""
    url = urlsplit(server.url)
    head = (
        f"PUT /v1/images/{path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {server.tokens['admin']}\r\n"
        f"Content-Length: {length}\r\nContent-Type: application/octet-stream\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname or "", url.port or 80), timeout=30) as client:
        client.sendall(head + body)
        yield client


def audited(admin: httpx.Client, name: str) -> list[str]:
    """The outcomes (reasons) the audit log recorded for the writes of Image ``name``."""
    items = admin.get("/v1/audit", params={"kind": "Image", "name": name}).json()["items"]
    return [item.get("reason", "") for item in items]


def upload(client: httpx.Client, name: str, data: bytes, **query: Any) -> httpx.Response:
    params = {"pool": "lib", "sha256": sha(data), **query}
    return client.put(f"/v1/images/{name}/content", params=params, content=data)


def test_an_uploaded_qcow2_becomes_a_ready_image_seen_by_every_host(libraries: LiveServer) -> None:
    with libraries.client("admin") as admin:
        answer = upload(admin, "golden", QCOW2)
        assert answer.status_code == 201, answer.text
        spec = answer.json()["spec"]
        assert spec["file"] == "vp-image-golden.qcow2"
        assert spec["upload"] == {"sha256": sha(QCOW2), "size_bytes": len(QCOW2)}
        wait(lambda: phase(admin, "images", "golden") == "Ready")
        image = admin.get("/v1/images/golden").json()
        assert image["status"]["hosts"] == ["h1", "h2"]
        assert image["status"]["size_bytes"] == len(QCOW2)
        # an operator may make a volume of it, as of any Ready disk image
        with libraries.client("operator") as operator:
            doc = manifest("Volume", "root", pool="vols", size_gib=1, source={"image": "golden"})
            assert operator.post("/v1/volumes", json=doc).status_code == 201
    assert library_files(libraries) == {
        "vp-image-golden.qcow2": f"{WRITTEN_IMAGE} qcow2 {len(QCOW2)} {sha(QCOW2)}"
    }
    assert spooled(libraries) == []


def test_an_iso_is_uploaded_as_an_image_of_kind_iso(libraries: LiveServer) -> None:
    with libraries.client("admin") as admin:
        answer = upload(admin, "installer", ISO, kind="Iso")
        assert answer.status_code == 201, answer.text
        assert answer.json()["spec"]["format"] == "iso"
        wait(lambda: phase(admin, "images", "installer") == "Ready")


REFUSALS = [
    # (what, the upload's changes, status, reason)
    ("a corrupted upload", {"sha256": sha(b"something else")}, 422, "ChecksumMismatch"),
    ("a raw file said to be qcow2", {"data": RAW}, 422, "WrongFormat"),
    ("a qcow2 file said to be an ISO", {"kind": "Iso"}, 422, "WrongFormat"),
    ("a checksum that is not one", {"sha256": "abc"}, 422, "Invalid"),
    ("a kernel in qcow2", {"kind": "Kernel", "format": "qcow2"}, 422, "Invalid"),
    ("an unknown kind", {"kind": "Floppy"}, 422, "Invalid"),
    ("a volume pool", {"pool": "vols"}, 422, "NotAnImageLibrary"),
    ("a pool that does not exist", {"pool": "nope"}, 422, "PoolNotFound"),
    ("a name that is not one", {"name": "Bad_Name"}, 422, "Invalid"),
    ("an empty file", {"data": b""}, 422, "EmptyUpload"),
    ("an operator", {"role": "operator"}, 403, "Forbidden"),
]


@pytest.mark.parametrize(("what", "change", "status", "reason"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_uploads_are_refused_and_leave_nothing(
    libraries: LiveServer, what: str, change: dict[str, Any], status: int, reason: str
) -> None:
    data = change.pop("data", QCOW2)
    name = change.pop("name", "refused")
    query = {"pool": "lib", "sha256": sha(data), "kind": "Disk", **change}
    role = query.pop("role", "admin")
    with libraries.client(role) as client:
        answer = client.put(f"/v1/images/{name}/content", params=query, content=data)
    assert (answer.status_code, answer.json()["reason"]) == (status, reason), (what, answer.text)
    with libraries.client("admin") as admin:
        assert admin.get("/v1/images").json()["items"] == []
    assert library_files(libraries) == {}
    assert spooled(libraries) == []


def test_an_image_that_exists_is_not_uploaded_over(libraries: LiveServer) -> None:
    with libraries.client("admin") as admin:
        assert upload(admin, "golden", QCOW2).status_code == 201
        again = upload(admin, "golden", QCOW2 + b"more")
        assert (again.status_code, again.json()["reason"]) == (409, "AlreadyExists")
    assert library_files(libraries) == {
        "vp-image-golden.qcow2": f"{WRITTEN_IMAGE} qcow2 {len(QCOW2)} {sha(QCOW2)}"
    }


def test_spec_upload_is_the_servers_to_set(libraries: LiveServer) -> None:
    """It lets the file be checked through libvirt alone: an admin's own Image may not claim it."""
    with libraries.client("admin") as admin:
        doc = manifest(
            "Image", "claimed", pool="lib", file="planted.qcow2", kind="Disk",
            upload={"sha256": sha(QCOW2), "size_bytes": 5},
        )  # fmt: skip
        refused = admin.post("/v1/images", json=doc)
    assert (refused.status_code, refused.json()["reason"]) == (422, "UploadOnly")


def test_the_library_quota_refuses_before_anything_is_written(libraries: LiveServer) -> None:
    with libraries.client("admin") as admin:
        quota = admin.patch("/v1/settings/images.library_max_gib", json={"spec": {"value": 1}})
        assert quota.status_code == 200, quota.text
        assert upload(admin, "small", QCOW2).status_code == 201
    # a GiB announced, 16 bytes sent: the refusal comes before the body is read
    with sent_in_part(libraries, f"big/content?pool=lib&sha256={'0' * 64}", 1024**3, QCOW2[:16]) as client:
        answer = client.recv(65536).decode()
    status, _, body = answer.partition("\r\n")[0], None, answer.partition("\r\n\r\n")[2]
    assert status.startswith("HTTP/1.1 413"), answer
    assert json.loads(body)["reason"] == "LibraryQuotaExceeded"
    assert "images.library_max_gib" in json.loads(body)["message"]
    assert sorted(library_files(libraries)) == ["vp-image-small.qcow2"]


def test_an_upload_without_its_length_is_refused(libraries: LiveServer) -> None:
    with libraries.client("admin") as admin:
        answer = admin.put(
            "/v1/images/chunked/content",
            params={"pool": "lib", "sha256": sha(QCOW2)},
            content=iter([QCOW2]),  # sent chunked: no Content-Length
        )
    assert (answer.status_code, answer.json()["reason"]) == (411, "LengthRequired")


def test_an_upload_cut_off_midway_leaves_nothing(libraries: LiveServer) -> None:
    """The client goes away after part of the body: no Image, no file, no spool."""
    with sent_in_part(libraries, f"cut/content?pool=lib&sha256={sha(QCOW2)}", len(QCOW2), QCOW2[:1000]):
        pass  # and the connection closes
    with libraries.client("admin") as admin:
        wait(lambda: audited(admin, "cut") == ["UploadCutOff"])  # the route heard the client go
        assert spooled(libraries) == []
        assert admin.get("/v1/images/cut").status_code == 404
        assert upload(admin, "cut", QCOW2).status_code == 201  # a retry starts clean
    assert sorted(library_files(libraries)) == ["vp-image-cut.qcow2"]


def test_an_upload_is_not_held_to_the_apis_body_limit(libraries: LiveServer) -> None:
    """Other requests' bodies stop at 1 MiB; an image is as large as the library's quota allows."""
    big = QCOW2 + bytes(3 * 1024 * 1024)
    with libraries.client("admin") as admin:
        answer = upload(admin, "big", big)
        assert answer.status_code == 201, answer.text
        assert answer.json()["spec"]["upload"]["size_bytes"] == len(big)


def test_deleting_an_uploaded_image_deletes_its_files(libraries: LiveServer) -> None:
    with libraries.client("admin") as admin:
        assert upload(admin, "golden", QCOW2).status_code == 201
        wait(lambda: phase(admin, "images", "golden") == "Ready")
        deleted = admin.delete("/v1/images/golden")
        assert deleted.status_code == 200, deleted.text
        wait(lambda: admin.get("/v1/images/golden").status_code == 404)
    assert library_files(libraries) == {}


def test_one_upload_per_name_at_a_time(libraries: LiveServer) -> None:
    """Two uploads of one name would write the same files on the hosts: the second is refused."""
    with sent_in_part(libraries, f"twice/content?pool=lib&sha256={sha(QCOW2)}", len(QCOW2), QCOW2[:1000]):
        wait(lambda: spooled(libraries))  # the first is being received
        with libraries.client("admin") as admin:
            second = upload(admin, "twice", QCOW2)
            assert (second.status_code, second.json()["reason"]) == (409, "UploadInProgress"), second.text
    with libraries.client("admin") as admin:
        wait(lambda: audited(admin, "twice") == ["UploadInProgress", "UploadCutOff"])
        assert upload(admin, "twice", QCOW2).status_code == 201  # once the first is over
