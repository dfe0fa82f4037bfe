"""VMs imported from an OVA (issue 34, item 1), over the simulator and the real app: the OVF
(written here) gives the VM's name, CPU, memory, disks and NIC count; the disks (VMDKs made
by ``qemu-img``) become Images in the library and copies of them the VM's volumes. A bad OVA
is a 422 that leaves nothing: no Image, volume or VM, no file on a host or in the spool."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_image_import import files  # noqa: F401
from tests.api.test_image_upload import libraries, library_files, sha, spooled  # noqa: F401
from tests.api.test_images import manifest, phase, wait
from tests.conftest import LiveServer

pytestmark = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="qemu-img is not installed")

OVF = """<?xml version="1.0" encoding="UTF-8"?>{prolog}
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1"
    xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData">
  <References>{files}</References>
  <DiskSection><Info>disks</Info>{disks}</DiskSection>
  <VirtualSystem ovf:id="vm">
    <Name>{name}</Name>
    <VirtualHardwareSection>
      <Item><rasd:ResourceType>3</rasd:ResourceType><rasd:VirtualQuantity>2</rasd:VirtualQuantity></Item>
      <Item><rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits>
        <rasd:ResourceType>4</rasd:ResourceType><rasd:VirtualQuantity>{memory}</rasd:VirtualQuantity></Item>
      {nics}
    </VirtualHardwareSection>
  </VirtualSystem>
</Envelope>
"""
NIC = "<Item><rasd:ResourceType>10</rasd:ResourceType><rasd:ElementName>{what}</rasd:ElementName></Item>"
BOMB = """
<!DOCTYPE Envelope [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>"""
XXE = '\n<!DOCTYPE Envelope [<!ENTITY x SYSTEM "file:///etc/passwd">]>'


def make_ova(
    directory: Path,
    hrefs: list[str],
    *,
    name: str = "Web Appliance",
    nics: int = 2,
    prolog: str = "",
    nic_text: str = "nic",
    capacity: str = "",
    memory: int = 768,
    tarred: list[str] | None = None,
) -> bytes:
    """An OVA as VirtualBox and VMware export one: the OVF first, then the VMDKs (made by
    qemu-img, of 16 MiB and 32 MiB...); ``tarred``: the members put in, when not all."""
    references = "".join(f'<File ovf:id="file{i}" ovf:href="{href}"/>' for i, href in enumerate(hrefs))
    disks = "".join(
        f'<Disk ovf:diskId="disk{i}" ovf:fileRef="file{i}"{capacity}/>' for i in range(len(hrefs))
    )
    nic_items = "".join(NIC.format(what=nic_text) for _ in range(nics))
    ovf = OVF.format(prolog=prolog, files=references, disks=disks, name=name, nics=nic_items, memory=memory)
    (directory / "vm.ovf").write_text(ovf)
    members = ["vm.ovf"]
    for index, href in enumerate(hrefs):
        if "/" not in href:
            size = f"{16 * (index + 1)}M"
            subprocess.run(
                ["qemu-img", "create", "-q", "-f", "vmdk", str(directory / href), size], check=True
            )
            members.append(href)
    ova = directory / "vm.ova"
    with tarfile.open(ova, "w", format=tarfile.USTAR_FORMAT) as archive:
        for member in members if tarred is None else tarred:
            archive.add(directory / member, arcname=member)
    return ova.read_bytes()


@pytest.fixture
def lan(libraries: LiveServer) -> Iterator[LiveServer]:  # noqa: F811
    with libraries.client("admin") as admin:
        doc = manifest("Network", "lan", kind="bridge", bridge="br0", cluster="c1")
        assert admin.post("/v1/networks", json=doc).status_code == 201
    yield libraries


def put_ova(client: httpx.Client, data: bytes, **query: object) -> httpx.Response:
    params = {"pool": "vols", "sha256": sha(data), "network": "lan", **query}
    return client.put("/v1/vms/actions/import-ova", params=params, content=data)


def nothing_left(server: LiveServer, admin: httpx.Client) -> None:
    for plural in ("images", "volumes", "vms"):
        assert admin.get(f"/v1/{plural}").json()["items"] == [], plural
    assert library_files(server) == {}
    assert spooled(server) == []


def test_an_uploaded_ova_of_two_disks_becomes_a_stopped_vm_as_its_ovf_says(
    lan: LiveServer, tmp_path: Path
) -> None:
    ova = make_ova(tmp_path, ["web-disk1.vmdk", "web-disk2.vmdk"])
    with lan.client("admin") as admin:
        answer = put_ova(admin, ova)
        assert answer.status_code == 201, answer.text
        kinds = [(item["kind"], item["metadata"]["name"]) for item in answer.json()["items"]]
        assert kinds == [
            ("Image", "web-appliance-disk0"),
            ("Image", "web-appliance-disk1"),
            ("Volume", "web-appliance-disk0"),
            ("Volume", "web-appliance-disk1"),
            ("VirtualMachine", "web-appliance"),
        ]
        spec = admin.get("/v1/vms/web-appliance").json()["spec"]
        assert (spec["cpu"], spec["memory_mib"], spec["run_policy"]) == (2, 768, "Manual")
        assert spec["disks"] == [
            {"volume": "web-appliance-disk0", "boot_order": 1},
            {"volume": "web-appliance-disk1", "boot_order": None},
        ]
        assert [nic["network"] for nic in spec["nics"]] == ["lan", "lan"]
        for disk in ("disk0", "disk1"):
            volume = admin.get(f"/v1/volumes/web-appliance-{disk}").json()["spec"]
            assert (volume["pool"], volume["size_gib"]) == ("vols", 1)
            assert volume["source"]["image"] == f"web-appliance-{disk}"
            wait(lambda disk=disk: phase(admin, "volumes", f"web-appliance-{disk}") == "Ready")
        wait(lambda: phase(admin, "vms", "web-appliance") == "Stopped")
    assert sorted(library_files(lan)) == [
        "vp-image-web-appliance-disk0.qcow2",
        "vp-image-web-appliance-disk1.qcow2",
    ]
    assert spooled(lan) == []


def test_an_ova_from_a_url_is_started_when_asked(  # its appliance has no NIC: the hosts have no bridge
    lan: LiveServer,
    files: tuple[Path, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    served, base = files
    (served / "vm.ova").write_bytes(ova := make_ova(tmp_path, ["only.vmdk"], nics=0))
    body = {"url": f"{base}/vm.ova", "sha256": sha(ova), "pool": "vols", "name": "imported", "start": True}
    with lan.client("admin") as admin:
        answer = admin.post("/v1/vms/actions/import-ova", json=body)
        assert answer.status_code == 201, answer.text
        assert admin.get("/v1/vms/imported").json()["spec"]["run_policy"] == "AlwaysOnUnlessStoppedManually"
        wait(lambda: phase(admin, "vms", "imported") == "Running")


BAD_OVAS = [
    # (what, make_ova arguments, query changes, status, reason)
    ("no disk", {"hrefs": []}, {}, 422, "InvalidOva"),
    ("a disk missing from the tar", {"hrefs": ["a.vmdk", "b.vmdk"], "tarred": ["vm.ovf", "a.vmdk"]}, {}, 422, "InvalidOva"),
    ("a path out of the tar", {"hrefs": ["a.vmdk", "../../etc/passwd"]}, {}, 422, "InvalidOva"),
    ("an absurd capacity", {"hrefs": ["a.vmdk"], "capacity": ' ovf:capacity="9" ovf:capacityAllocationUnits="byte * 2^60"'}, {}, 422, "InvalidOva"),
    ("an entity bomb", {"hrefs": ["a.vmdk"], "prolog": BOMB, "nic_text": "&d;"}, {}, 422, "InvalidOva"),
    ("an external entity", {"hrefs": ["a.vmdk"], "prolog": XXE, "nic_text": "&x;"}, {}, 422, "InvalidOva"),
    ("NICs without a network", {"hrefs": ["a.vmdk"]}, {"network": []}, 422, "NetworkRequired"),
    ("a network per NIC, one short", {"hrefs": ["a.vmdk"], "nics": 3}, {"network": ["lan", "lan"]}, 422, "NetworkMismatch"),
    ("a network that does not exist", {"hrefs": ["a.vmdk"]}, {"network": "wan"}, 422, "NetworkNotFound"),
    ("a pool that does not exist", {"hrefs": ["a.vmdk"]}, {"pool": "nowhere"}, 422, "PoolNotFound"),
    ("an absurd memory", {"hrefs": ["a.vmdk"], "memory": 99_999_999_999}, {}, 422, "Invalid"),
    ("a name that is no DNS label", {"hrefs": ["a.vmdk"]}, {"name": "Not_A_Name"}, 422, "Invalid"),
    ("a corrupted OVA", {"hrefs": ["a.vmdk"]}, {"sha256": "0" * 64}, 422, "ChecksumMismatch"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "made", "change", "status", "reason"), BAD_OVAS, ids=[bad[0] for bad in BAD_OVAS]
)
def test_bad_ovas_are_refused_with_the_reason_and_leave_nothing(
    lan: LiveServer,
    tmp_path: Path,
    what: str,
    made: dict[str, object],
    change: dict[str, object],
    status: int,
    reason: str,
) -> None:
    ova = make_ova(tmp_path, **made)  # type: ignore[arg-type]
    with lan.client("admin") as admin:
        answer = put_ova(admin, ova, **change)
        assert (answer.status_code, answer.json()["reason"]) == (status, reason), (what, answer.text)
        nothing_left(lan, admin)


def test_a_vm_name_taken_is_refused_before_a_host_is_written(lan: LiveServer, tmp_path: Path) -> None:
    ova = make_ova(tmp_path, ["a.vmdk", "b.vmdk"])
    with lan.client("admin") as admin:
        taken = manifest("VirtualMachine", "taken", run_policy="Manual")
        assert admin.post("/v1/vms", json=taken).status_code == 201
        answer = put_ova(admin, ova, name="taken")
        assert (answer.status_code, answer.json()["reason"]) == (409, "AlreadyExists"), answer.text
        assert admin.get("/v1/images").json()["items"] == []
        assert admin.get("/v1/volumes").json()["items"] == []
    assert library_files(lan) == {}
    assert spooled(lan) == []


def test_an_operator_cannot_import_an_ova(lan: LiveServer, tmp_path: Path) -> None:
    ova = make_ova(tmp_path, ["a.vmdk"])
    with lan.client("operator") as operator:
        answer = put_ova(operator, ova)
    assert (answer.status_code, answer.json()["reason"]) == (403, "Forbidden")


async def test_a_vmdk_that_names_other_files_is_not_converted(tmp_path: Path) -> None:
    """A VMDK's descriptor names its extents by path: one naming any file but itself would have
    the server read that file (``/etc/shadow``), so it is refused before qemu-img converts it."""
    from virtplane.domain.errors import Invalid
    from virtplane.services.image_upload import convert_to_qcow2

    split = tmp_path / "split.vmdk"  # a text descriptor and its extent files beside it
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "vmdk", "-o", "subformat=twoGbMaxExtentSparse", str(split), "16M"],
        check=True,
    )
    with pytest.raises(Invalid, match="refers to other files"):
        await convert_to_qcow2(str(split), str(tmp_path / "out.qcow2"))
    assert not (tmp_path / "out.qcow2").exists()
    whole = tmp_path / "whole.vmdk"
    subprocess.run(["qemu-img", "create", "-q", "-f", "vmdk", str(whole), "16M"], check=True)
    assert await convert_to_qcow2(str(whole), str(tmp_path / "whole.qcow2")) == 16 * 1024 * 1024
