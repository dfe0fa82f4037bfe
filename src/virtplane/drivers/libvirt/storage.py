"""Directory pools, qcow2 volumes and the disk snapshots the control plane owns.

Everything goes through libvirt's storage API, so it works the same for a
remote host (qemu+ssh://) as for a local one: libvirt runs ``qemu-img`` on the
host that holds the files.

Disk snapshots are plain volumes next to the original, named
``<volume>.snap-<snapshot id>``, and their handle is their path. They are not
libvirt snapshot metadata, because libvirt 9.0 refuses to migrate a domain
that has internal snapshots and cannot revert external ones; volumes in a
shared pool stay reachable from every host, so a VM with snapshots can still
be drained and reverted anywhere.

- A disk that no running domain uses is copied with a volume clone.
- A disk in use by a running domain is copied with a push-mode backup job,
  which gives a point-in-time image while the guest keeps running.

All functions block and take an open virConnect.
"""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from typing import Any

from virtplane.domain.names import LIBVIRT_VOLUME_NAME
from virtplane.drivers.base import PoolRef, VolumeInfo
from virtplane.drivers.errors import NotFound, PermanentError
from virtplane.drivers.libvirt import _libvirt
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.domain_xml import backup_xml, dir_pool_xml, parse_domain_xml, volume_xml

GIB = 1024**3
_SNAPSHOT_SUFFIX = ".snap-"
_BACKUP_POLL_S = 0.1
_UPLOAD_CHUNK = 256 * 1024


def check_name(kind: str, value: str) -> str:
    """Volume and snapshot names become file names on the host: no paths, no surprises."""
    if not LIBVIRT_VOLUME_NAME.matches(value) or ".." in value:
        raise PermanentError(f"{kind} {value!r} must be letters, digits, '.', '_' or '-' (no '..')")
    return value


def snapshot_volume_name(volume: str, snapshot_id: str) -> str:
    return f"{check_name('volume name', volume)}{_SNAPSHOT_SUFFIX}{check_name('snapshot id', snapshot_id)}"


def _is_missing(exc: BaseException) -> bool:
    lv = _libvirt.load()
    return _libvirt.error_code(exc) in (lv.VIR_ERR_NO_STORAGE_POOL, lv.VIR_ERR_NO_STORAGE_VOL)


def volume_info(vol: Any) -> VolumeInfo:
    capacity = int(vol.info()[1])
    return VolumeInfo(name=vol.name(), path=vol.path(), size_gib=-(-capacity // GIB))


def pool_path(pool: Any) -> str:
    return ET.fromstring(pool.XMLDesc(0)).findtext("target/path", default="")


def ensure_pool(conn: Any, ref: PoolRef) -> Any:
    """The started directory pool ``ref`` names, defined (and its directory made) if missing."""
    lv = _libvirt.load()
    check_name("pool name", ref.name)
    if not os.path.isabs(ref.path):
        raise PermanentError(f"pool path {ref.path!r} is not absolute")
    try:
        pool = conn.storagePoolLookupByName(ref.name)
    except lv.libvirtError as exc:
        if not _is_missing(exc):
            raise
        pool = conn.storagePoolDefineXML(dir_pool_xml(ref.name, ref.path), 0)
        try:
            pool.build(0)  # creates the directory on the host
        except lv.libvirtError as build_error:
            if _libvirt.error_code(build_error) != lv.VIR_ERR_NO_SUPPORT:
                raise
        pool.setAutostart(1)
    existing_path = pool_path(pool)
    if os.path.normpath(existing_path) != os.path.normpath(ref.path):
        raise PermanentError(f"pool {ref.name!r} exists with path {existing_path!r}, not {ref.path!r}")
    if not pool.isActive():
        pool.create(0)
    return pool


def lookup_pool(conn: Any, ref: PoolRef) -> Any:
    lv = _libvirt.load()
    try:
        pool = conn.storagePoolLookupByName(ref.name)
    except lv.libvirtError as exc:
        if _is_missing(exc):
            raise NotFound(f"storage pool {ref.name!r} does not exist") from exc
        raise
    if not pool.isActive():
        pool.create(0)
    return pool


def lookup_volume(pool: Any, name: str) -> Any | None:
    lv = _libvirt.load()
    try:
        return pool.storageVolLookupByName(name)
    except lv.libvirtError as exc:
        if not _is_missing(exc):
            raise
    pool.refresh(0)  # a file written behind the pool's back (e.g. by a backup job)
    try:
        return pool.storageVolLookupByName(name)
    except lv.libvirtError as exc:
        if _is_missing(exc):
            return None
        raise


def volume_by_path(conn: Any, path: str) -> Any | None:
    lv = _libvirt.load()
    try:
        return conn.storageVolLookupByPath(path)
    except lv.libvirtError as exc:
        if _is_missing(exc):
            return None
        raise


def _clone(pool: Any, name: str, source: Any, capacity_bytes: int, *, can_resize: bool) -> Any:
    vol = pool.createXMLFrom(volume_xml(name, capacity_bytes), source, 0)
    if can_resize and int(vol.info()[1]) < capacity_bytes:
        vol.resize(capacity_bytes, 0)
    return vol


def create_volume(
    conn: Any,
    ref: PoolRef,
    name: str,
    size_gib: int,
    source: Any | None,
    source_capacity: int = 0,
    *,
    can_resize: bool,
    linked: bool = False,
) -> VolumeInfo:
    """``source``: a library volume the caller has just checked (``images.check_image``);
    ``linked``: a qcow2 overlay on it (its backing file) instead of a copy."""
    check_name("volume name", name)
    if size_gib < 1:
        raise PermanentError(f"volume size must be at least 1 GiB, got {size_gib}")
    pool = ensure_pool(conn, ref)
    existing = lookup_volume(pool, name)
    if existing is not None:
        return volume_info(existing)  # idempotent: created by an earlier, interrupted call
    if source is None:
        return volume_info(pool.createXML(volume_xml(name, size_gib * GIB), 0))
    capacity = max(size_gib * GIB, source_capacity)
    if linked:
        return volume_info(pool.createXML(volume_xml(name, capacity, backing=str(source.path())), 0))
    return volume_info(_clone(pool, name, source, capacity, can_resize=can_resize))


def upload_volume(conn: Any, ref: PoolRef, name: str, data: bytes, *, can_stream: bool) -> VolumeInfo:
    """A raw volume holding ``data``, sent over the connection (``virStorageVolUpload``), so a
    remote host gets it too. Written whole on every call (an earlier call may have been cut
    off), so call it only while no running domain uses the volume.
    ``can_stream`` False (libvirt's test driver, which keeps no contents): the volume is only made."""
    check_name("volume name", name)
    pool = ensure_pool(conn, ref)
    vol = lookup_volume(pool, name)
    if vol is not None and int(vol.info()[1]) != len(data):
        vol.delete(0)
        vol = None
    if vol is None:
        vol = pool.createXML(volume_xml(name, len(data), "raw"), 0)
    if can_stream:
        stream = conn.newStream(0)
        vol.upload(stream, 0, len(data), 0)
        view = memoryview(data)
        while view:
            view = view[stream.send(bytes(view[:_UPLOAD_CHUNK])) :]
        stream.finish()
    return volume_info(vol)


def delete_volume(conn: Any, ref: PoolRef, name: str) -> None:
    lv = _libvirt.load()
    try:
        pool = lookup_pool(conn, ref)
    except NotFound:
        return
    vol = lookup_volume(pool, name)
    if vol is None:
        return
    try:
        vol.delete(0)
    except lv.libvirtError as exc:
        if not _is_missing(exc):
            raise


def resize_volume(conn: Any, ref: PoolRef, name: str, size_gib: int) -> VolumeInfo:
    pool = lookup_pool(conn, ref)
    vol = lookup_volume(pool, name)
    if vol is None:
        raise NotFound(f"volume {name!r} does not exist in pool {ref.name!r}")
    current = int(vol.info()[1])
    wanted = size_gib * GIB
    if wanted < current:
        raise PermanentError(f"volume {name!r} is {current // GIB} GiB; shrinking a disk is refused")
    if wanted > current:
        vol.resize(wanted, 0)
    return volume_info(vol)


def _running_user(conn: Any, path: str) -> tuple[LibvirtDomain, str] | None:
    """The active domain that has ``path`` as a disk, and the disk's target dev."""
    lv = _libvirt.load()
    for dom in LibvirtDomain.list_all(conn, active_only=True):
        try:
            disks = parse_domain_xml(dom.xml()).disks
        except lv.libvirtError:
            continue  # it stopped meanwhile
        for dev, disk_path in disks:
            if disk_path == path:
                return dom, dev
    return None


def _run_backup(dom: LibvirtDomain, dev: str, destination: str) -> None:
    lv = _libvirt.load()
    dom.begin_backup(backup_xml([(dev, destination)]))
    while dom.job_type() != lv.VIR_DOMAIN_JOB_NONE:
        time.sleep(_BACKUP_POLL_S)
    stats = dom.job_stats(completed=True)
    if stats.get("type") != lv.VIR_DOMAIN_JOB_COMPLETED:
        raise PermanentError(f"backup of {dev} failed: {stats.get('errmsg', 'job did not complete')}")


def snapshot_volume(conn: Any, ref: PoolRef, name: str, snapshot_id: str, *, live_backup: bool) -> str:
    """Copy the volume's content into a new volume beside it; returns the copy's path (the handle).

    ``live_backup``: the host can copy disks of running guests with a backup job
    (QEMU). Without it (libvirt's test driver) the disk is cloned as it is.
    """
    snap_name = snapshot_volume_name(name, snapshot_id)
    pool = lookup_pool(conn, ref)
    vol = lookup_volume(pool, name)
    if vol is None:
        raise NotFound(f"volume {name!r} does not exist in pool {ref.name!r}")
    existing = lookup_volume(pool, snap_name)
    if existing is not None:
        return str(existing.path())
    user = _running_user(conn, vol.path()) if live_backup else None
    if user is None:
        return str(_clone(pool, snap_name, vol, int(vol.info()[1]), can_resize=False).path())
    dom, dev = user
    destination = os.path.join(pool_path(pool), snap_name)
    try:
        _run_backup(dom, dev, destination)
    except Exception:
        pool.refresh(0)
        partial = lookup_volume(pool, snap_name)
        if partial is not None:
            partial.delete(0)
        raise
    copied = lookup_volume(pool, snap_name)
    if copied is None:
        raise PermanentError(f"backup of {name!r} finished but {destination!r} is not in pool {ref.name!r}")
    return str(copied.path())


def revert_volume(conn: Any, ref: PoolRef, name: str, handle: str) -> None:
    """Replace the volume's content with the snapshot's. Safe to retry: the snapshot is never touched."""
    check_name("volume name", name)
    snapshot = volume_by_path(conn, handle)
    if snapshot is None:
        raise NotFound(f"disk snapshot {handle!r} does not exist")
    _replace(conn, lookup_pool(conn, ref), name, snapshot, int(snapshot.info()[1]))


def restore_volume(conn: Any, source_ref: PoolRef, source_name: str, ref: PoolRef, name: str) -> VolumeInfo:
    """``name`` made anew from ``source_name`` (a backup's volume) as it reads through its
    backing files: libvirt's clone is ``qemu-img convert``, which flattens the chain. At least
    the size it had. Safe to retry: the source is only read."""
    check_name("volume name", name)
    source = lookup_volume(ensure_pool(conn, source_ref), check_name("backup volume", source_name))
    if source is None:
        raise NotFound(f"backup volume {source_name!r} does not exist in pool {source_ref.name!r}")
    pool = ensure_pool(conn, ref)
    current = lookup_volume(pool, name)
    capacity = max(int(source.info()[1]), int(current.info()[1]) if current is not None else 0)
    return volume_info(_replace(conn, pool, name, source, capacity))


def _replace(conn: Any, pool: Any, name: str, source: Any, capacity: int) -> Any:
    """``name`` deleted (unless a running domain uses it) and cloned from ``source``; a crash
    in between leaves it missing or half copied, and a retry makes it again."""
    current = lookup_volume(pool, name)
    if current is not None:
        user = _running_user(conn, current.path())
        if user is not None:
            raise PermanentError(
                f"volume {name!r} is in use by running domain {user[0].name!r}; stop it first"
            )
        current.delete(0)
    return _clone(pool, name, source, capacity, can_resize=True)


def copy_snapshot(
    conn: Any, ref: PoolRef, name: str, size_gib: int, handle: str, *, can_resize: bool, linked: bool = False
) -> VolumeInfo:
    """A new volume ``name`` in ``ref`` cloned from the disk snapshot ``handle`` (its path), or
    ``linked``: a qcow2 overlay on it."""
    check_name("volume name", name)
    snapshot = volume_by_path(conn, handle)
    if snapshot is None:
        raise NotFound(f"disk snapshot {handle!r} does not exist")
    pool = ensure_pool(conn, ref)
    existing = lookup_volume(pool, name)
    if existing is not None:
        return volume_info(existing)  # idempotent: made by an earlier, interrupted call
    capacity = max(size_gib * GIB, int(snapshot.info()[1]))
    if linked:
        return volume_info(pool.createXML(volume_xml(name, capacity, backing=str(snapshot.path())), 0))
    return volume_info(_clone(pool, name, snapshot, capacity, can_resize=can_resize))


def delete_snapshot(conn: Any, handle: str) -> None:
    vol = volume_by_path(conn, handle)
    if vol is not None:
        vol.delete(0)


__all__ = [
    "GIB",
    "check_name",
    "copy_snapshot",
    "create_volume",
    "delete_snapshot",
    "delete_volume",
    "ensure_pool",
    "lookup_pool",
    "lookup_volume",
    "pool_path",
    "resize_volume",
    "restore_volume",
    "revert_volume",
    "snapshot_volume",
    "snapshot_volume_name",
    "volume_by_path",
    "volume_info",
]
