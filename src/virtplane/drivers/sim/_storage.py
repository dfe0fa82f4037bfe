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

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from virtplane.drivers.base import ImageInfo, ImageRef, PoolRef, VolumeInfo
from virtplane.drivers.errors import NotFound, PermanentError, TransientError

from ._model import URI_SCHEME, SimFaultError

if TYPE_CHECKING:
    from ._cloud import SimCloud
    from ._migration import DiskCopy

SHARED = ""
"""The host part of a shared pool's key."""

VOLUME_SNAPSHOT_SCHEME = "sim-snap://"
GIB = 1024**3


@dataclass(eq=False)
class SimVolume:
    name: str
    path: str
    size_gib: int
    content: str = ""

    def info(self) -> VolumeInfo:
        return VolumeInfo(name=self.name, path=self.path, size_gib=self.size_gib)


@dataclass(eq=False)
class SimPool:
    name: str
    shared: bool
    capacity_gib: int
    hosts: set[str] = field(default_factory=set)
    volumes: dict[str, SimVolume] = field(default_factory=dict)
    owner: str = SHARED  # the host of a local pool

    @property
    def used_gib(self) -> int:
        return sum(v.size_gib for v in self.volumes.values())

    def check_room(self, extra_gib: int, what: str) -> None:
        """PermanentError if it can never fit the pool, TransientError if it does not fit now."""
        if self.capacity_gib <= 0 or extra_gib <= 0:
            return
        if extra_gib > self.capacity_gib:
            raise PermanentError(f"{what} needs {extra_gib} GiB; pool {self.name} holds {self.capacity_gib}")
        free = self.capacity_gib - self.used_gib
        if extra_gib > free:
            raise TransientError(f"pool {self.name} is full: {what} needs {extra_gib} GiB, {free} GiB free")


@dataclass(frozen=True)
class SavedVolume:
    pool: str
    volume: str
    size_gib: int
    content: str


def volume_path(pool: str, volume: str) -> str:
    return f"{URI_SCHEME}{pool}/{volume}"


class SimStorage:
    def __init__(self, cloud: SimCloud) -> None:
        self._cloud = cloud
        self._pools: dict[tuple[str, str], SimPool] = {}  # (host or SHARED, pool name)
        self._snapshots: dict[str, SavedVolume] = {}

    def _changed(self, pool: SimPool, volume: str | None = None) -> None:
        """Mark a pool (or one of its volumes) for the state file; a no-op without one."""
        journal = self._cloud.journal
        if journal is not None:
            if volume is None:
                journal.mark_pool(pool.owner, pool.name)
            else:
                journal.mark_volume(pool.owner, pool.name, volume)

    def _snapshot_changed(self, handle: str) -> None:
        journal = self._cloud.journal
        if journal is not None:
            journal.mark_snapshot(handle)

    # ------------------------------------------------------------------ the state file

    def find_pool(self, owner: str, name: str) -> SimPool | None:
        return self._pools.get((owner, name))

    def saved_volume(self, handle: str) -> SavedVolume | None:
        return self._snapshots.get(handle)

    def load(self, pools: list[SimPool], snapshots: dict[str, SavedVolume]) -> None:
        self._pools = {(pool.owner, pool.name): pool for pool in pools}
        self._snapshots = snapshots

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
            pool = self._pools[key] = SimPool(ref.name, ref.shared, ref.capacity_gib, owner=key[0])
            self._changed(pool)
        elif ref.capacity_gib > 0 and pool.capacity_gib != ref.capacity_gib:
            pool.capacity_gib = ref.capacity_gib  # a grown (or re-declared) pool
            self._changed(pool)
        if host not in pool.hosts:
            pool.hosts.add(host)
            self._changed(pool)

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
            pool = self._pools[(owner, pool_name)] = SimPool(pool_name, owner == SHARED, 0, owner=owner)
            self._changed(pool)
        pool.volumes[file] = SimVolume(file, volume_path(pool_name, file), size_gib, content)
        self._changed(pool, file)

    def inspect_image(self, host: str, image: ImageRef) -> tuple[ImageInfo, SimVolume]:
        try:
            found = self._volume(host, image.pool, image.file)
        except NotFound:
            raise NotFound(
                f"image file {image.file} in library pool {image.pool.name} does not exist"
            ) from None
        size = found.size_gib * GIB
        return ImageInfo(size_bytes=size, virtual_size_bytes=size, format=image.format), found

    def create_volume(
        self, host: str, ref: PoolRef, name: str, size_gib: int, source: ImageRef | None
    ) -> VolumeInfo:
        pool = self.pool(host, ref)
        existing = pool.volumes.get(name)
        if existing is not None:
            if existing.size_gib != size_gib:
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
        volume = pool.volumes[name] = SimVolume(name, volume_path(ref.name, name), size_gib, content)
        self._changed(pool, name)
        return volume.info()

    def delete_volume(self, host: str, ref: PoolRef, name: str) -> None:
        pool = self.pool(host, ref)
        volume = pool.volumes.get(name)
        if volume is None:
            return
        self._refuse_if_in_use(pool, volume, "delete")
        del pool.volumes[name]
        self._changed(pool, name)

    def resize_volume(self, host: str, ref: PoolRef, name: str, size_gib: int) -> VolumeInfo:
        pool = self.pool(host, ref)
        volume = self._volume(host, ref, name)
        if size_gib < volume.size_gib:
            raise PermanentError(f"volume {name} cannot shrink from {volume.size_gib} to {size_gib} GiB")
        pool.check_room(size_gib - volume.size_gib, f"growing volume {name}")
        volume.size_gib = size_gib
        self._changed(pool, name)
        return volume.info()

    # ------------------------------------------------------------------ snapshots

    def snapshot_volume(self, host: str, ref: PoolRef, name: str, snapshot_id: str) -> str:
        volume = self._volume(host, ref, name)
        handle = f"{VOLUME_SNAPSHOT_SCHEME}{ref.name}/{name}@{snapshot_id}"
        self._snapshots[handle] = SavedVolume(ref.name, name, volume.size_gib, volume.content)
        self._snapshot_changed(handle)
        return handle

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
        volume.size_gib = saved.size_gib
        self._changed(pool, name)

    def delete_snapshot(self, handle: str) -> None:
        if self._snapshots.pop(handle, None) is not None:
            self._snapshot_changed(handle)

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
        pool, volume = self.resolve_located(path, host)
        volume.content = content
        self._changed(pool, volume.name)

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
            pool.volumes[disk.volume] = SimVolume(disk.volume, disk.path, disk.size_gib, disk.content)
            self._changed(pool, disk.volume)

    def _refuse_if_in_use(self, pool: SimPool, volume: SimVolume, action: str) -> None:
        for host_name in pool.hosts:
            user = self._cloud.live_user_of(host_name, volume.path)
            if user is not None:
                # busy, not broken: it works once the domain is off
                raise TransientError(
                    f"cannot {action} volume {volume.name}: domain {user} on sim://{host_name} is using it"
                )
