"""``virtplane vm import-ova FILE --pool P`` end to end against a live server: the CLI computes
the OVA's SHA-256 and uploads it; the VM is made with what the OVF gives; a wrong SHA-256 given
is refused and nothing is left."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.api.test_images import manifest, wait
from tests.api.test_ova_import import make_ova
from tests.cli.conftest import Invoke
from tests.conftest import LiveServer
from virtplane.cli.exit_codes import ExitCode

pytestmark = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="qemu-img is not installed")


@pytest.fixture
def pools(server: LiveServer) -> LiveServer:
    with server.client("admin") as admin:
        for plural, doc in (
            ("hosts", manifest("Host", "h1", uri="sim://h1", cluster="c1")),
            ("storagepools", manifest("StoragePool", "lib", kind="shared", cluster="c1", capacity_gib=10, content="images")),
            ("storagepools", manifest("StoragePool", "vols", kind="shared", cluster="c1", capacity_gib=10)),
        ):  # fmt: skip
            assert admin.post(f"/v1/{plural}", json=doc).status_code == 201
        wait(lambda: admin.get("/v1/hosts/h1").json()["status"]["connection"] == "Up")
    return server


def test_an_ova_file_becomes_a_vm(invoke: Invoke, pools: LiveServer, tmp_path: Path) -> None:
    ova = tmp_path / "appliance.ova"
    ova.write_bytes(make_ova(tmp_path, ["a.vmdk", "b.vmdk"], nics=0))
    result = invoke("vm", "import-ova", str(ova), "--pool", "vols", "--name", "app")
    assert result.exit_code == 0, result.output
    assert "vm/app created" in result.output
    assert "2 vCPU, 768 MiB, 2 disks, 0 NICs, as the OVF asks; run policy Manual" in result.output
    with pools.client("admin") as admin:
        disks = admin.get("/v1/vms/app").json()["spec"]["disks"]
        assert [d["volume"] for d in disks] == ["app-disk0", "app-disk1"]


def test_a_wrong_checksum_is_refused_and_leaves_nothing(
    invoke: Invoke, pools: LiveServer, tmp_path: Path
) -> None:
    ova = tmp_path / "appliance.ova"
    ova.write_bytes(make_ova(tmp_path, ["a.vmdk"], nics=0))
    result = invoke("vm", "import-ova", str(ova), "--pool", "vols", "--sha256", "0" * 64)
    assert result.exit_code == ExitCode.FAILED, result.output
    assert "ChecksumMismatch" in result.output
    with pools.client("admin") as admin:
        assert admin.get("/v1/vms").json()["items"] == []
        assert admin.get("/v1/images").json()["items"] == []
