"""``virtplane image upload FILE --name N --pool P`` end to end against a live server: the CLI
computes the SHA-256 when not given and the server checks it; a wrong one given is refused and
nothing is left."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.api.test_image_upload import ISO, QCOW2
from tests.api.test_images import manifest, phase, wait
from tests.cli.conftest import Invoke
from tests.conftest import LiveServer
from virtplane.cli.exit_codes import ExitCode


@pytest.fixture
def library(server: LiveServer) -> LiveServer:
    with server.client("admin") as admin:
        for plural, doc in (
            ("hosts", manifest("Host", "h1", uri="sim://h1", cluster="c1")),
            ("storagepools", manifest("StoragePool", "lib", kind="shared", cluster="c1", capacity_gib=10, content="images")),
        ):  # fmt: skip
            assert admin.post(f"/v1/{plural}", json=doc).status_code == 201
        wait(lambda: admin.get("/v1/hosts/h1").json()["status"]["connection"] == "Up")
    return server


def test_an_upload_computes_the_checksum_and_the_image_becomes_ready(
    invoke: Invoke, library: LiveServer, tmp_path: Path
) -> None:
    disk, installer = tmp_path / "disk.qcow2", tmp_path / "netinst.iso"
    disk.write_bytes(QCOW2)
    installer.write_bytes(ISO)
    result = invoke("image", "upload", str(disk), "--name", "golden", "--pool", "lib")
    assert result.exit_code == 0, result.output
    assert f"sha256 {hashlib.sha256(QCOW2).hexdigest()}" in result.output
    given = hashlib.sha256(ISO).hexdigest().upper()  # as some sites publish it
    result = invoke(
        "image",
        "upload",
        str(installer),
        "--name",
        "installer",
        "--pool",
        "lib",
        "--kind",
        "Iso",
        "--sha256",
        given,
    )
    assert result.exit_code == 0, result.output
    with library.client("admin") as admin:
        for name in ("golden", "installer"):
            wait(lambda name=name: phase(admin, "images", name) == "Ready")
        assert admin.get("/v1/images/installer").json()["spec"]["kind"] == "Iso"


def test_a_wrong_checksum_is_refused_and_leaves_no_image(
    invoke: Invoke, library: LiveServer, tmp_path: Path
) -> None:
    disk = tmp_path / "disk.qcow2"
    disk.write_bytes(QCOW2)
    result = invoke("image", "upload", str(disk), "--name", "golden", "--pool", "lib", "--sha256", "0" * 64)
    assert result.exit_code == ExitCode.FAILED, result.output
    assert "ChecksumMismatch" in result.output
    with library.client("admin") as admin:
        assert admin.get("/v1/images/golden").status_code == 404


def test_an_operator_is_denied(invoke: Invoke, library: LiveServer, tmp_path: Path) -> None:
    disk = tmp_path / "disk.qcow2"
    disk.write_bytes(QCOW2)
    result = invoke("image", "upload", str(disk), "--name", "golden", "--pool", "lib", role="operator")
    assert result.exit_code == ExitCode.DENIED, result.output
    assert "Forbidden" in result.output
