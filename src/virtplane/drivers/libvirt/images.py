"""Image library files on a libvirt host, checked before every use.

A library image is found by its plain file name in its pool (never by a path),
and must be a regular file of the expected format with no backing file. libvirt
follows links when it lists a directory pool and reports the target's facts, so
it cannot tell a link that leads out of the pool from a file inside it. Where
the control plane sees the host's files at the same path (a local daemon, or a
library mounted on the control plane too) it resolves the real path itself, after
checking that the file it sees is the one libvirt reports (size, mode, owner and
modification time to the nanosecond). Where it cannot see them, the image is
refused: an unverifiable file is not used. libvirt's test driver keeps its
volumes in memory, so there libvirt's view is the whole truth.

A file virtplane wrote itself (``write_image``: an upload through libvirt's stream) is
made by libvirt as a regular file in the pool, so no link can be planted there short of
the host's root; it is checked through libvirt alone, by the exact size written
(``ImageRef.written_bytes``), and its library need not be seen by the control plane.

Messages name the library pool and the file, never where a link leads.
"""

from __future__ import annotations

import os
import stat
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from virtplane.drivers.base import ImageInfo, ImageRef
from virtplane.drivers.errors import ImageRefused, NotFound
from virtplane.drivers.libvirt.domain_xml import volume_xml
from virtplane.drivers.libvirt.storage import check_name, ensure_pool, lookup_volume, pool_path

_UPLOAD_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class VolumeFacts:
    """What libvirt reports about a directory pool's volume (of a link's target, for a link)."""

    type: str
    format: str
    capacity: int
    physical: int | None  # only regular files have it
    backing: bool
    mode: int | None = None
    owner: int | None = None
    group: int | None = None
    mtime_ns: int | None = None


def _timestamp_ns(text: str | None) -> int | None:
    if not text:
        return None
    seconds, _, fraction = text.partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction or "0").ljust(9, "0")[:9])


def _int(text: str | None, base: int = 10) -> int | None:
    return int(text, base) if text else None


def volume_facts(xml: str) -> VolumeFacts:
    root = ET.fromstring(xml)
    physical = root.findtext("physical")
    fmt = root.find("target/format")
    return VolumeFacts(
        type=root.get("type", ""),
        format=fmt.get("type", "") if fmt is not None else "",
        capacity=int(root.findtext("capacity", default="0")),
        physical=int(physical) if physical is not None else None,
        backing=bool(root.findtext("backingStore/path")),
        mode=_int(root.findtext("target/permissions/mode"), 8),
        owner=_int(root.findtext("target/permissions/owner")),
        group=_int(root.findtext("target/permissions/group")),
        mtime_ns=_timestamp_ns(root.findtext("target/timestamps/mtime")),
    )


def check_local(path: str, pool_dir: str, facts: VolumeFacts, what: str) -> None:
    """Resolve ``path`` here and refuse it unless it is a regular file inside ``pool_dir``.

    The file seen here must be the one libvirt reported, or nothing is known about it.
    """
    unverifiable = ImageRefused(
        f"{what} cannot be checked: the control plane does not see the library's files at the "
        "pool's path (a library on a remote host must be mounted on the control plane too)"
    )
    try:
        seen = os.stat(path)
    except OSError:
        raise unverifiable from None
    if facts.physical is None or (
        seen.st_size,
        stat.S_IMODE(seen.st_mode),
        seen.st_uid,
        seen.st_gid,
        seen.st_mtime_ns,
    ) != (facts.physical, facts.mode, facts.owner, facts.group, facts.mtime_ns):
        raise unverifiable
    root = os.path.realpath(pool_dir)
    real = os.path.realpath(path)
    if real == root or os.path.commonpath([real, root]) != root:
        raise ImageRefused(f"{what} is a link that leads out of the library; only files inside it are used")
    if not stat.S_ISREG(seen.st_mode):
        raise ImageRefused(f"{what} is not a regular file")


def check_image(conn: Any, image: ImageRef, *, local_view: bool) -> tuple[Any, ImageInfo]:
    """The library volume ``image`` names, checked; with its facts. Blocks; takes an open virConnect."""
    check_name("image file", image.file)
    what = f"image file {image.file} in library pool {image.pool.name}"
    pool = ensure_pool(conn, image.pool)
    vol = lookup_volume(pool, image.file)
    if vol is None:
        raise NotFound(f"{what} does not exist")
    facts = volume_facts(vol.XMLDesc(0))
    if facts.type != "file" or (local_view and facts.physical is None):
        raise ImageRefused(f"{what} is not a regular file")
    if facts.backing:
        raise ImageRefused(f"{what} has a backing file; library images must stand alone")
    if facts.format != image.format:
        raise ImageRefused(f"{what} is {facts.format or 'of an unknown format'}, not {image.format}")
    if image.written_bytes is not None:
        if local_view and facts.physical != image.written_bytes:  # the test driver keeps no contents
            raise ImageRefused(f"{what} is not the file virtplane wrote ({image.written_bytes} bytes)")
    elif local_view:
        check_local(str(vol.path()), pool_path(pool), facts, what)
    size = facts.physical if facts.physical is not None else facts.capacity
    return vol, ImageInfo(size_bytes=size, virtual_size_bytes=facts.capacity, format=facts.format)


def write_image(conn: Any, image: ImageRef, source: str, *, can_stream: bool) -> None:
    """Upload the local file ``source`` as ``image.file`` (``virStorageVolUpload``), replacing an
    earlier copy; a failed write deletes what it made. Blocks; takes an open virConnect.
    ``can_stream`` False (libvirt's test driver, which keeps no contents): the volume is only made."""
    check_name("image file", image.file)
    pool = ensure_pool(conn, image.pool)
    earlier = lookup_volume(pool, image.file)
    if earlier is not None:
        earlier.delete(0)
    size = os.stat(source).st_size
    # written as a plain file and probed after; the test driver's volume only records the format
    vol = pool.createXML(volume_xml(image.file, size, "raw" if can_stream else image.format), 0)
    try:
        if can_stream:
            _send(conn, vol, source, size)
        pool.refresh(0)  # libvirt probes the written file's format again
    except BaseException:
        vol.delete(0)
        raise


def _send(conn: Any, vol: Any, source: str, size: int) -> None:
    stream = conn.newStream(0)
    vol.upload(stream, 0, size, 0)
    try:
        with open(source, "rb") as file:
            while chunk := file.read(_UPLOAD_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[stream.send(bytes(view)) :]
        stream.finish()
    except BaseException:
        stream.abort()
        raise


def image_path(conn: Any, image: ImageRef | None, *, local_view: bool) -> str | None:
    """The checked path of a boot file (kernel or initrd), for the domain definition."""
    if image is None:
        return None
    vol, _ = check_image(conn, image, local_view=local_view)
    return str(vol.path())


__all__ = ["VolumeFacts", "check_image", "check_local", "image_path", "volume_facts", "write_image"]
