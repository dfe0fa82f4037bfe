"""Simulated storage: pools, volumes with string content, volume snapshots.

A shared pool is one object seen by every host that ensured it; a local pool
exists once per host. An image library is a pool whose files an admin placed
(``SimCloud.put_image_file``); the simulator has no links or devices, so a file
that is there is a regular one. Volume paths are ``sim://POOL/VOLUME`` on every host, as
a directory pool's file path is the same on every host; a local volume is told
apart by the host that asks. Volumes are fully allocated: their size counts
against the pool's capacity (a pool with capacity 0 is unbounded).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from virtplane.domain.images import PROBE_BYTES, probe_format
from virtplane.drivers.base import ImageInfo, ImageRef, PoolRef, VolumeInfo
from virtplane.drivers.errors import ImageRefused, NotFound, PermanentError, TransientError

from ._changes import ChangeLog, Entity, Persisted, Record, RecordMap
from ._model import URI_SCHEME, SimFaultError

if TYPE_CHECKING:
    from ._precopy import DiskCopy

WRITTEN_IMAGE = "written-image"
"""The content of a library file written through the driver (an upload): its probed format,
size and digest (``written-image FORMAT SIZE SHA256``), so it survives a restart of the simulator."""

SHARED = ""
"""The host part of a shared pool's key."""

VOLUME_SNAPSHOT_SCHEME = "sim-snap://"
GIB = 1024**3

DiskUser = Callable[[str, str], str | None]
"""(host, path) → the live domain on that host that has the disk attached, if any."""


class SimVolume(Record):
    path = Persisted[str]()
    size_gib = Persisted[int]()
    content = Persisted[str]()

    def __init__(self, name: str, path: str, size_gib: int, content: str = "") -> None:
        self.name = name
        self.path = path
        self.size_gib = size_gib
        self.content = content

    def info(self) -> VolumeInfo:
        return VolumeInfo(name=self.name, path=self.path, size_gib=self.size_gib)


class PoolVolumes(RecordMap[str, SimVolume]):
    """A pool's volumes and the sum of their sizes, kept as volumes come, go and grow:
    placing a volume in a pool of thousands must not read them all (fleet-scale demos)."""

    def __init__(self, log: ChangeLog, prefix: tuple[str, ...]) -> None:
        super().__init__(log, Entity.VOLUME, prefix)
        self.used_gib = 0

    def load(self, key: str, value: SimVolume) -> None:
        replaced = self.get(key)
        super().load(key, value)
        self.used_gib += value.size_gib - (replaced.size_gib if replaced is not None else 0)

    def pop(self, key: str) -> SimVolume | None:
        value = super().pop(key)
        if value is not None:
            self.used_gib -= value.size_gib
        return value

    def resize(self, volume: SimVolume, size_gib: int) -> None:
        """The one way a volume of this pool changes size."""
        self.used_gib += size_gib - volume.size_gib
        volume.size_gib = size_gib


class SimPool(Record):
    shared = Persisted[bool]()
    capacity_gib = Persisted[int]()
    hosts = Persisted[frozenset[str]]()  # the hosts that ensured it

    def __init__(
        self, changes: ChangeLog, name: str, shared: bool, capacity_gib: int, owner: str = SHARED
    ) -> None:
        self.name = name
        self.owner = owner  # the host of a local pool
        self.shared = shared
        self.capacity_gib = capacity_gib
        self.hosts = frozenset()
        self.volumes = PoolVolumes(changes, (owner, name))

    def check_room(self, extra_gib: int, what: str) -> None:
        """PermanentError if it can never fit the pool, TransientError if it does not fit now."""
        if self.capacity_gib <= 0 or extra_gib <= 0:
            return
        if extra_gib > self.capacity_gib:
            raise PermanentError(f"{what} needs {extra_gib} GiB; pool {self.name} holds {self.capacity_gib}")
        free = self.capacity_gib - self.volumes.used_gib
        if extra_gib > free:
            raise TransientError(f"pool {self.name} is full: {what} needs {extra_gib} GiB, {free} GiB free")


@dataclass(frozen=True)
class SavedVolume:
    pool: str
    volume: str
    size_gib: int
    content: str


def read_upload(source: str) -> tuple[str, int, str]:
    """(probed format, size, SHA-256) of a file the control plane writes into a library."""
    digest = hashlib.sha256()
    size = 0
    with open(source, "rb") as file:
        fmt = probe_format(file.read(PROBE_BYTES))
        file.seek(0)
        while chunk := file.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
    return fmt, size, digest.hexdigest()


def volume_path(pool: str, volume: str) -> str:
    return f"{URI_SCHEME}{pool}/{volume}"


class SimStorage:
    def __init__(self, changes: ChangeLog, disk_user: DiskUser) -> None:
        self._changes = changes
        self._disk_user = disk_user
        # by (host of a local pool or SHARED, pool name)
        self._pools: RecordMap[tuple[str, str], SimPool] = RecordMap(changes, Entity.POOL)
        self._snapshots: RecordMap[str, SavedVolume] = RecordMap(changes, Entity.SNAPSHOT)

    # ------------------------------------------------------------------ the state file

    def find_pool(self, owner: str, name: str) -> SimPool | None:
        return self._pools.get((owner, name))

    def load(self, pools: Iterable[SimPool], snapshots: Iterable[tuple[str, SavedVolume]]) -> None:
        for pool in pools:
            self._pools.load((pool.owner, pool.name), pool)
        for handle, saved in snapshots:
            self._snapshots.load(handle, saved)

    # ------------------------------------------------------------------ pools

    def ensure_pool(self, host: str, ref: PoolRef) -> None:
        other_kind = [
            pool
            for (owner, name), pool in self._pools.items()
            if name == ref.name and pool.shared != ref.shared
        ]
        if other_kind:
            kind = "shared" if other_kind[0].shared else "local"
            raise PermanentError(f"pool name {ref.name} is already used by a {kind} pool")
        key = (SHARED if ref.shared else host, ref.name)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools.put(
                key, SimPool(self._changes, ref.name, ref.shared, ref.capacity_gib, key[0])
            )
        elif ref.capacity_gib > 0:
            pool.capacity_gib = ref.capacity_gib  # a grown (or re-declared) pool
        pool.hosts |= {host}

    def pool(self, host: str, ref: PoolRef) -> SimPool:
        pool = self._pools.get((SHARED if ref.shared else host, ref.name))
        if pool is None or host not in pool.hosts:
            raise NotFound(f"pool {ref.name} is not defined on sim://{host}")
        return pool

    def _volume(self, host: str, ref: PoolRef, name: str) -> SimVolume:
        volume = self.pool(host, ref).volumes.get(name)
        if volume is None:
            raise NotFound(f"volume {name} does not exist in pool {ref.name}")
        return volume

    # ------------------------------------------------------------------ volumes

    def put_image_file(self, owner: str, pool_name: str, file: str, content: str, size_gib: int) -> None:
        """An admin's file in a library pool (``owner``: SHARED or the host of a local pool)."""
        pool = self._pools.get((owner, pool_name))
        if pool is None:
            pool = self._pools.put(
                (owner, pool_name), SimPool(self._changes, pool_name, owner == SHARED, 0, owner)
            )
        pool.volumes.put(file, SimVolume(file, volume_path(pool_name, file), size_gib, content))

    def inspect_image(self, host: str, image: ImageRef) -> tuple[ImageInfo, SimVolume]:
        try:
            found = self._volume(host, image.pool, image.file)
        except NotFound:
            raise NotFound(
                f"image file {image.file} in library pool {image.pool.name} does not exist"
            ) from None
        size = found.size_gib * GIB
        fmt = image.format
        if found.content.startswith(WRITTEN_IMAGE + " "):
            _, fmt, written, _digest = found.content.split(" ")
            size = int(written)
            what = f"image file {image.file} in library pool {image.pool.name}"
            if fmt != image.format:  # libvirt's probe reports the file's real format
                raise ImageRefused(f"{what} is {fmt}, not {image.format}")
            if image.written_bytes is not None and size != image.written_bytes:
                raise ImageRefused(f"{what} is not the file virtplane wrote ({image.written_bytes} bytes)")
        return ImageInfo(size_bytes=size, virtual_size_bytes=size, format=fmt), found

    def write_image(self, host: str, image: ImageRef, fmt: str, size: int, sha256: str) -> None:
        """A file uploaded into a library: replaces an earlier copy, as libvirt's upload does."""
        pool = self.pool(host, image.pool)
        pool.volumes.pop(image.file)
        size_gib = -(-size // GIB)
        pool.check_room(size_gib, f"image file {image.file}")
        content = f"{WRITTEN_IMAGE} {fmt} {size} {sha256}"
        pool.volumes.put(
            image.file, SimVolume(image.file, volume_path(image.pool.name, image.file), size_gib, content)
        )

    def create_volume(
        self, host: str, ref: PoolRef, name: str, size_gib: int, source: ImageRef | None
    ) -> VolumeInfo:
        pool = self.pool(host, ref)
        existing = pool.volumes.get(name)
        if existing is not None:
            # larger is the same create's: a copy takes its source's size when that is larger
            if existing.size_gib < size_gib:
                raise PermanentError(
                    f"volume {name} already exists in pool {ref.name} with {existing.size_gib} GiB"
                )
            return existing.info()  # a re-run of the same create
        if size_gib < 1:
            raise PermanentError(f"volume {name}: size must be at least 1 GiB")
        content = ""
        if source is not None:  # the volume is at least as big as the image, as with libvirt
            info, image = self.inspect_image(host, source)
            size_gib = max(size_gib, -(-info.virtual_size_bytes // GIB))
            content = image.content
        pool.check_room(size_gib, f"volume {name}")
        return pool.volumes.put(name, SimVolume(name, volume_path(ref.name, name), size_gib, content)).info()

    def upload_volume(self, host: str, ref: PoolRef, name: str, data: bytes) -> VolumeInfo:
        """A small file (a seed image) as a volume of no GiB; its content is kept as base64 text."""
        pool = self.pool(host, ref)
        content = base64.b64encode(data).decode()
        volume = pool.volumes.get(name)
        if volume is None:
            return pool.volumes.put(name, SimVolume(name, volume_path(ref.name, name), 0, content)).info()
        volume.content = content
        return volume.info()

    def delete_volume(self, host: str, ref: PoolRef, name: str) -> None:
        pool = self.pool(host, ref)
        volume = pool.volumes.get(name)
        if volume is None:
            return
        self._refuse_if_in_use(pool, volume, "delete")
        pool.volumes.pop(name)

    def resize_volume(self, host: str, ref: PoolRef, name: str, size_gib: int) -> VolumeInfo:
        pool = self.pool(host, ref)
        volume = self._volume(host, ref, name)
        if size_gib < volume.size_gib:
            raise PermanentError(f"volume {name} cannot shrink from {volume.size_gib} to {size_gib} GiB")
        pool.check_room(size_gib - volume.size_gib, f"growing volume {name}")
        pool.volumes.resize(volume, size_gib)
        return volume.info()

    # ------------------------------------------------------------------ snapshots

    def snapshot_volume(self, host: str, ref: PoolRef, name: str, snapshot_id: str) -> str:
        volume = self._volume(host, ref, name)
        handle = f"{VOLUME_SNAPSHOT_SCHEME}{ref.name}/{name}@{snapshot_id}"
        self._snapshots.put(handle, SavedVolume(ref.name, name, volume.size_gib, volume.content))
        return handle

    def copy_snapshot(self, host: str, ref: PoolRef, name: str, size_gib: int, handle: str) -> VolumeInfo:
        saved = self._snapshots.get(handle)
        if saved is None:
            raise NotFound(f"volume snapshot {handle} does not exist")
        pool = self.pool(host, ref)
        existing = pool.volumes.get(name)
        if existing is not None:
            return existing.info()  # a re-run of the same copy
        size = max(size_gib, saved.size_gib)
        pool.check_room(size, f"volume {name}")
        return pool.volumes.put(
            name, SimVolume(name, volume_path(ref.name, name), size, saved.content)
        ).info()

    def revert_volume(self, host: str, ref: PoolRef, name: str, handle: str) -> None:
        saved = self._snapshots.get(handle)
        if saved is None:
            raise NotFound(f"volume snapshot {handle} does not exist")
        pool = self.pool(host, ref)
        volume = self._volume(host, ref, name)
        self._refuse_if_in_use(pool, volume, "revert")
        if saved.size_gib > volume.size_gib:
            pool.check_room(saved.size_gib - volume.size_gib, f"reverting volume {name}")
        volume.content = saved.content
        pool.volumes.resize(volume, saved.size_gib)

    def restore_volume(
        self, host: str, source: PoolRef, source_name: str, ref: PoolRef, name: str
    ) -> VolumeInfo:
        """``name`` made anew (or made) with the content of ``source_name`` (a backup's volume:
        the simulator keeps each one whole, so no chain is read)."""
        saved = self._volume(host, source, source_name)
        pool = self.pool(host, ref)
        volume = pool.volumes.get(name)
        if volume is None:
            pool.check_room(saved.size_gib, f"volume {name}")
            new = SimVolume(name, volume_path(ref.name, name), saved.size_gib, saved.content)
            return pool.volumes.put(name, new).info()
        self._refuse_if_in_use(pool, volume, "restore")
        if saved.size_gib > volume.size_gib:
            pool.check_room(saved.size_gib - volume.size_gib, f"restoring volume {name}")
            pool.volumes.resize(volume, saved.size_gib)
        volume.content = saved.content
        return volume.info()

    def delete_snapshot(self, handle: str) -> None:
        self._snapshots.pop(handle)

    # ------------------------------------------------------------------ paths (sim helpers, migration)

    @staticmethod
    def split_path(path: str) -> tuple[str, str]:
        rest = path.removeprefix(URI_SCHEME) if path.startswith(URI_SCHEME) else ""
        pool, _, volume = rest.partition("/")
        if not pool or not volume or "/" in volume:
            raise PermanentError(f"{path!r} is not a simulated volume path (sim://POOL/VOLUME)")
        return pool, volume

    def locate_local(self, host: str, path: str) -> tuple[SimPool, SimVolume] | None:
        """The volume ``path`` names as ``host`` sees it (a shared pool, or host's local one)."""
        try:
            pool_name, volume_name = self.split_path(path)
        except PermanentError:
            return None
        for key in ((SHARED, pool_name), (host, pool_name)):
            pool = self._pools.get(key)
            if pool is not None and host in pool.hosts and volume_name in pool.volumes:
                return pool, pool.volumes[volume_name]
        return None

    def resolve(self, path: str, host: str | None) -> SimVolume:
        """For the sim-only helpers: a shared volume, or the one local volume with that path."""
        return self.resolve_located(path, host)[1]

    def write_content(self, path: str, host: str | None, content: str) -> None:
        self.resolve_located(path, host)[1].content = content

    def resolve_located(self, path: str, host: str | None) -> tuple[SimPool, SimVolume]:
        if host is not None:
            found = self.locate_local(host, path)
            if found is None:
                raise SimFaultError(f"no volume {path} on sim://{host}")
            return found
        try:
            pool_name, volume_name = self.split_path(path)
        except PermanentError as exc:
            raise SimFaultError(str(exc)) from exc
        matches = [
            (pool, pool.volumes[volume_name])
            for (_, name), pool in self._pools.items()
            if name == pool_name and volume_name in pool.volumes
        ]
        if len(matches) != 1:
            problem = "no volume" if not matches else "several local volumes (pass host=)"
            raise SimFaultError(f"{problem} at {path}")
        return matches[0]

    def disks_missing_on(self, target: str, source: str, paths: Iterable[str], copied: set[str]) -> list[str]:
        """Disks of a migrating domain that ``target`` would not see. Only volumes this
        simulator manages are checked; other paths (plain files) are taken on trust."""
        missing = []
        for path in paths:
            if path in copied:
                continue
            if self.locate_local(source, path) is not None and self.locate_local(target, path) is None:
                missing.append(path)
        return missing

    def check_copy_room(self, host: str, disks: Iterable[DiskCopy]) -> None:
        for disk in disks:
            pool = self._pools.get((host, disk.pool))
            if pool is None:
                raise PermanentError(f"sim://{host} has no local pool {disk.pool} for disk {disk.path}")
            existing = pool.volumes.get(disk.volume)
            pool.check_room(disk.size_gib - (existing.size_gib if existing else 0), f"disk {disk.path}")

    def land_copies(self, host: str, disks: Iterable[DiskCopy]) -> None:
        """Write block-migrated disks into ``host``'s local pools (the source keeps its copies)."""
        disks = tuple(disks)
        self.check_copy_room(host, disks)
        for disk in disks:
            pool = self._pools[(host, disk.pool)]
            pool.volumes.put(disk.volume, SimVolume(disk.volume, disk.path, disk.size_gib, disk.content))

    def _refuse_if_in_use(self, pool: SimPool, volume: SimVolume, action: str) -> None:
        for host_name in pool.hosts:
            user = self._disk_user(host_name, volume.path)
            if user is not None:
                # busy, not broken: it works once the domain is off
                raise TransientError(
                    f"cannot {action} volume {volume.name}: domain {user} on sim://{host_name} is using it"
                )
