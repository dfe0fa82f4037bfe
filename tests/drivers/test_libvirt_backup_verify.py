"""The libvirt driver's backup verification (``drivers.libvirt.backup_verify``) with the real
``qemu-img`` on a chain made as the backup jobs make it (a full qcow2, an incremental overlay on
it): sound, then a link that leads elsewhere, a file gone, and a corrupted cluster of the base."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from tests.deploy.tools import tool_or_skip
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.libvirt.backup_verify import verify_chains


def qemu(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    img, io = tool_or_skip("qemu-img", "qemu-utils"), tool_or_skip("qemu-io", "qemu-utils")
    qemu(img, "create", "-q", "-f", "qcow2", str(tmp_path / "full.qcow2"), "4M")
    qemu(io, "-c", "write -P 0xab 0 64k", str(tmp_path / "full.qcow2"))
    qemu(
        img,
        "create",
        "-q",
        "-f",
        "qcow2",
        "-F",
        "qcow2",
        "-b",
        "full.qcow2",
        str(tmp_path / "inc.qcow2"),
        "4M",
    )
    qemu(io, "-c", "write -P 0xcd 64k 64k", str(tmp_path / "inc.qcow2"))
    return tmp_path


def test_a_sound_chain_verifies(chain: Path) -> None:
    check = verify_chains(str(chain), (("inc.qcow2", "full.qcow2"),))
    assert (check.ok, check.message) == (True, "2 file(s) of 1 disk(s) checked, each disk read whole")
    assert sorted(p.name for p in chain.iterdir()) == ["full.qcow2", "inc.qcow2"], "the flat copy is gone"


def test_a_chain_that_is_not_the_records_fails(chain: Path) -> None:
    qemu("qemu-img", "create", "-q", "-f", "qcow2", str(chain / "other.qcow2"), "4M")
    check = verify_chains(str(chain), (("inc.qcow2", "other.qcow2"),))
    assert (
        not check.ok
        and check.message == "inc.qcow2: its chain is inc.qcow2 <- full.qcow2, not the backups it builds on"
    )
    (chain / "full.qcow2").unlink()  # the record names only the top: the link is what is broken
    check = verify_chains(str(chain), (("inc.qcow2",),))
    assert not check.ok and check.message.startswith("inc.qcow2: its backing chain does not open: "), (
        check.message
    )


def test_a_corrupted_cluster_of_the_base_fails(chain: Path) -> None:
    with (chain / "full.qcow2").open("r+b") as image:  # cluster 0's L2 entry made unaligned
        header = image.read(104)
        (l1_offset,) = struct.unpack(">Q", header[40:48])
        image.seek(l1_offset)
        (l1_entry,) = struct.unpack(">Q", image.read(8))
        l2_offset = l1_entry & 0x00FFFFFFFFFFFE00
        image.seek(l2_offset)
        (l2_entry,) = struct.unpack(">Q", image.read(8))
        image.seek(l2_offset)
        image.write(struct.pack(">Q", (l2_entry & ~0xFFFF) | 0x8000 | (1 << 63)))
    check = verify_chains(str(chain), (("inc.qcow2", "full.qcow2"),))
    assert not check.ok and check.message.startswith("full.qcow2: qemu-img check: "), check.message


def test_a_target_the_server_does_not_see_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="not reachable from the control plane's machine"):
        verify_chains(str(tmp_path / "elsewhere"), (("inc.qcow2",),))
