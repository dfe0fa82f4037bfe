"""The libvirt driver's check of library files, on real files: links out, devices, what it cannot see.

libvirt follows links and reports the target's facts, so the driver resolves the path
itself, after making sure the file it sees is the one libvirt reported.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from virtplane.drivers.errors import ImageRefused
from virtplane.drivers.libvirt.images import VolumeFacts, check_local, volume_facts


def facts_of(path: Path) -> VolumeFacts:
    """What libvirt reports for ``path`` (it follows links)."""
    seen = path.stat()
    return VolumeFacts(
        type="file",
        format="raw",
        capacity=seen.st_size,
        physical=seen.st_size,
        backing=False,
        mode=seen.st_mode & 0o7777,
        owner=seen.st_uid,
        group=seen.st_gid,
        mtime_ns=seen.st_mtime_ns,
    )


@pytest.fixture
def library(tmp_path: Path) -> Path:
    lib = tmp_path / "library"
    lib.mkdir()
    (lib / "vmlinuz").write_bytes(b"kernel")
    (tmp_path / "secret").write_text("root:$y$...")
    # a sibling whose path begins with the library's: outside it all the same
    (tmp_path / "library-private").mkdir()
    (tmp_path / "library-private" / "secret.qcow2").write_bytes(b"another tenant's disk")
    return lib


def test_a_regular_file_and_a_link_that_stays_inside_pass(library: Path) -> None:
    check_local(str(library / "vmlinuz"), str(library), facts_of(library / "vmlinuz"), "image")
    (library / "current").symlink_to("vmlinuz")
    check_local(str(library / "current"), str(library), facts_of(library / "current"), "image")


@pytest.mark.parametrize(
    "target",
    [
        "../secret",
        "{tmp}/secret",
        "/etc/hostname",
        "../library-private/secret.qcow2",
        "{tmp}/library-private/secret.qcow2",
    ],
)
def test_a_link_out_of_the_library_is_refused_without_saying_where_it_leads(
    library: Path, target: str
) -> None:
    target = target.format(tmp=library.parent)
    link = library / "escape.qcow2"
    link.symlink_to(target)
    with pytest.raises(ImageRefused) as refused:
        check_local(str(link), str(library), facts_of(link), "image file escape.qcow2")
    message = str(refused.value)
    assert "leads out of the library" in message
    assert "secret" not in message and "etc" not in message and str(library.parent) not in message


def test_a_device_or_a_directory_is_not_a_regular_file(library: Path) -> None:
    (library / "dev").symlink_to("/dev/null")  # a character device, as /dev/loop0 is a block one
    inside = library / "sub"
    inside.mkdir()
    for entry in (library / "dev", inside):
        facts = facts_of(entry)
        with pytest.raises(ImageRefused):
            check_local(str(entry), str(library), facts, "image")


def test_a_file_the_control_plane_cannot_match_with_libvirts_is_refused(library: Path) -> None:
    """A remote host's library that is not mounted here, or another file at the same path."""
    facts = facts_of(library / "vmlinuz")
    with pytest.raises(ImageRefused, match="cannot be checked"):
        check_local(str(library / "absent"), str(library), facts, "image")
    os.utime(library / "vmlinuz", ns=(0, 123))  # the file here is not the one libvirt saw
    with pytest.raises(ImageRefused, match="cannot be checked"):
        check_local(str(library / "vmlinuz"), str(library), facts, "image")
    no_physical = VolumeFacts("file", "raw", 6, None, False)  # libvirt's view of a device
    with pytest.raises(ImageRefused):
        check_local(str(library / "vmlinuz"), str(library), no_physical, "image")


def test_volume_facts_read_libvirts_xml() -> None:
    xml = """<volume type='file'><name>x</name><capacity unit='bytes'>1073741824</capacity>
      <physical unit='bytes'>196624</physical>
      <target><path>/lib/x</path><format type='qcow2'/>
        <permissions><mode>0640</mode><owner>0</owner><group>42</group></permissions>
        <timestamps><mtime>1796289432.8306442</mtime></timestamps></target>
      <backingStore><path>/etc/shadow</path><format type='raw'/></backingStore></volume>"""
    facts = volume_facts(xml)
    assert facts == VolumeFacts(
        type="file",
        format="qcow2",
        capacity=1073741824,
        physical=196624,
        backing=True,
        mode=0o640,
        owner=0,
        group=42,
        mtime_ns=1796289432830644200,
    )
    assert volume_facts("<volume type='file'><capacity>0</capacity></volume>").physical is None
