"""Images imported from an HTTP(S) URL (issue 34, item 1): the server fetches the file (here
from an HTTP server on 127.0.0.1 made by the test), checks the SHA-256 it was given, converts
a VMDK to qcow2 with ``qemu-img``, and writes it to the library's hosts; a refusal leaves
nothing behind."""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_image_upload import ISO, QCOW2, libraries, library_files, sha, spooled  # noqa: F401
from tests.api.test_images import phase, wait
from tests.conftest import LiveServer
from virtplane.drivers.sim._storage import WRITTEN_IMAGE


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def files(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served over HTTP on 127.0.0.1, and its base URL."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(_Quiet, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        thread.join(timeout=10)


def test_a_qcow2_and_an_iso_are_imported_from_a_url(libraries: LiveServer, files: tuple[Path, str]) -> None:  # noqa: F811
    served, base = files
    (served / "golden.qcow2").write_bytes(QCOW2)
    (served / "netinst.iso").write_bytes(ISO)
    with libraries.client("admin") as admin:
        for name, file, data, kind in (
            ("golden", "golden.qcow2", QCOW2, "Disk"),
            ("installer", "netinst.iso", ISO, "Iso"),
        ):
            body = {"url": f"{base}/{file}", "sha256": sha(data), "pool": "lib", "kind": kind}
            answer = admin.post(f"/v1/images/{name}/import", json=body)
            assert answer.status_code == 201, answer.text
            wait(lambda name=name: phase(admin, "images", name) == "Ready")
    assert library_files(libraries) == {
        "vp-image-golden.qcow2": f"{WRITTEN_IMAGE} qcow2 {len(QCOW2)} {sha(QCOW2)}",
        "vp-image-installer.iso": f"{WRITTEN_IMAGE} iso {len(ISO)} {sha(ISO)}",
    }


def test_a_vmdk_is_converted_to_qcow2(libraries: LiveServer, files: tuple[Path, str]) -> None:  # noqa: F811
    if shutil.which("qemu-img") is None:
        pytest.skip("qemu-img is not installed")
    served, _ = files
    vmdk = served / "appliance.vmdk"
    subprocess.run(["qemu-img", "create", "-q", "-f", "vmdk", str(vmdk), "16M"], check=True)
    body = {"url": f"{files[1]}/appliance.vmdk", "sha256": sha(vmdk.read_bytes()), "pool": "lib"}
    with libraries.client("admin") as admin:
        answer = admin.post("/v1/images/appliance/import", json=body)
        assert answer.status_code == 201, answer.text
        spec = answer.json()["spec"]
        assert (spec["file"], spec["format"]) == ("vp-image-appliance.qcow2", "qcow2")
        assert spec["upload"]["sha256"] != body["sha256"]  # the converted file's, as the library has it
        wait(lambda: phase(admin, "images", "appliance") == "Ready")
    (content,) = library_files(libraries).values()
    assert content.startswith(f"{WRITTEN_IMAGE} qcow2 ")
    assert spooled(libraries) == []


IMPORT_REFUSALS = [
    # (what, body changes, status, reason)
    ("a corrupted file", {"sha256": hashlib.sha256(b"else").hexdigest()}, 422, "ChecksumMismatch"),
    ("a missing file", {"url": "{base}/nothing.qcow2"}, 422, "FetchFailed"),
    ("nothing listening", {"url": "http://127.0.0.1:9/golden.qcow2"}, 422, "FetchFailed"),
    ("a file URL", {"url": "file:///etc/shadow"}, 422, "Invalid"),
    (
        "a raw file said to be qcow2",
        {"url": "{base}/disk.raw", "sha256": sha(b"\0" * 4096)},
        422,
        "WrongFormat",
    ),
    ("an unknown field", {"path": "/etc/shadow"}, 422, "Invalid"),
    ("a volume pool", {"pool": "vols"}, 422, "NotAnImageLibrary"),
]


@pytest.mark.parametrize(
    ("what", "change", "status", "reason"), IMPORT_REFUSALS, ids=[r[0] for r in IMPORT_REFUSALS]
)
def test_bad_imports_are_refused_and_leave_nothing(
    libraries: LiveServer,  # noqa: F811
    files: tuple[Path, str],
    what: str,
    change: dict[str, str],
    status: int,
    reason: str,
) -> None:
    served, base = files
    (served / "golden.qcow2").write_bytes(QCOW2)
    (served / "disk.raw").write_bytes(b"\0" * 4096)
    body = {"url": f"{base}/golden.qcow2", "sha256": sha(QCOW2), "pool": "lib"}
    body |= {key: value.format(base=base) for key, value in change.items()}
    with libraries.client("admin") as admin:
        answer = admin.post("/v1/images/imported/import", json=body)
        assert (answer.status_code, answer.json()["reason"]) == (status, reason), (what, answer.text)
        assert admin.get("/v1/images").json()["items"] == []
    assert library_files(libraries) == {}
    assert spooled(libraries) == []


def test_an_operator_cannot_import(libraries: LiveServer, files: tuple[Path, str]) -> None:  # noqa: F811
    served, base = files
    (served / "golden.qcow2").write_bytes(QCOW2)
    body = {"url": f"{base}/golden.qcow2", "sha256": sha(QCOW2), "pool": "lib"}
    with libraries.client("operator") as operator:
        answer = operator.post("/v1/images/imported/import", json=body)
    assert (answer.status_code, answer.json()["reason"]) == (403, "Forbidden")
    assert library_files(libraries) == {}


OVF = """<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1"
    xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData">
  <References>{files}</References>
  <DiskSection><Info>disks</Info>{disks}</DiskSection>
  <VirtualSystem ovf:id="appliance">
    <VirtualHardwareSection>
      <Item><rasd:ResourceType>3</rasd:ResourceType><rasd:VirtualQuantity>2</rasd:VirtualQuantity></Item>
      <Item><rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits>
        <rasd:ResourceType>4</rasd:ResourceType><rasd:VirtualQuantity>1024</rasd:VirtualQuantity></Item>
    </VirtualHardwareSection>
  </VirtualSystem>
</Envelope>
"""


def make_ova(directory: Path, name: str, hrefs: list[str]) -> bytes:
    """An OVA as VirtualBox and VMware export one: the OVF first, then the VMDKs (made by qemu-img)."""
    files = "".join(f'<File ovf:id="file{i}" ovf:href="{href}"/>' for i, href in enumerate(hrefs))
    disks = "".join(f'<Disk ovf:diskId="disk{i}" ovf:fileRef="file{i}"/>' for i in range(len(hrefs)))
    (directory / f"{name}.ovf").write_text(OVF.format(files=files, disks=disks))
    members = [f"{name}.ovf"]
    for href in hrefs:
        if "/" not in href:
            subprocess.run(
                ["qemu-img", "create", "-q", "-f", "vmdk", str(directory / href), "16M"], check=True
            )
            members.append(href)
    ova = directory / f"{name}.ova"
    with tarfile.open(ova, "w", format=tarfile.USTAR_FORMAT) as archive:
        for member in members:
            archive.add(directory / member, arcname=member)
    return ova.read_bytes()


def test_an_ovas_disk_is_imported_as_qcow2_with_what_its_ovf_asks_for(
    libraries: LiveServer,  # noqa: F811
    files: tuple[Path, str],
    tmp_path: Path,
) -> None:
    if shutil.which("qemu-img") is None:
        pytest.skip("qemu-img is not installed")
    served, base = files
    (served / "appliance.ova").write_bytes(ova := make_ova(tmp_path, "appliance", ["appliance-disk1.vmdk"]))
    with libraries.client("admin") as admin:
        body = {"url": f"{base}/appliance.ova", "sha256": sha(ova), "pool": "lib"}
        answer = admin.post("/v1/images/appliance/import", json=body)
        assert answer.status_code == 201, answer.text
        assert answer.json()["spec"]["format"] == "qcow2"
        wait(lambda: phase(admin, "images", "appliance") == "Ready")
        events = admin.get("/v1/events", params={"kind": "Image", "name": "appliance"}).json()["items"]
        uploaded = [e["message"] for e in events if e["reason"] == "Uploaded"]
        assert uploaded == [
            "uploaded by test-admin, from an OVA whose OVF asks for 2 vCPU and 1024 MiB (disk appliance-disk1.vmdk)"
        ]
    (content,) = library_files(libraries).values()
    assert content.startswith(f"{WRITTEN_IMAGE} qcow2 ")
    assert spooled(libraries) == []


@pytest.mark.parametrize(
    ("hrefs", "reason"),
    [
        (["a.vmdk", "b.vmdk"], "OvaDisks"),
        (["../../etc/shadow"], "InvalidOva"),
        (["missing/disk.vmdk"], "InvalidOva"),
    ],
    ids=["two disks", "a path out", "a path in"],
)
def test_ovas_it_cannot_take_are_refused_and_leave_nothing(
    libraries: LiveServer,  # noqa: F811
    files: tuple[Path, str],
    tmp_path: Path,
    hrefs: list[str],
    reason: str,
) -> None:
    if shutil.which("qemu-img") is None:
        pytest.skip("qemu-img is not installed")
    served, base = files
    (served / "bad.ova").write_bytes(ova := make_ova(tmp_path, "bad", hrefs))
    with libraries.client("admin") as admin:
        answer = admin.post(
            "/v1/images/bad/import", json={"url": f"{base}/bad.ova", "sha256": sha(ova), "pool": "lib"}
        )
        assert (answer.status_code, answer.json()["reason"]) == (422, reason), answer.text
        assert admin.get("/v1/images/bad").status_code == 404
    assert library_files(libraries) == {}
    assert spooled(libraries) == []
