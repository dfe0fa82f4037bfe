"""The storage operations of the libvirt driver: pools, images and volumes."""

from __future__ import annotations

from typing import Any

from virtplane.drivers.base import Capability, ImageInfo, ImageRef, PoolRef, VolumeInfo
from virtplane.drivers.libvirt import images, storage
from virtplane.drivers.libvirt.calls import LibvirtCalls


class VolumeOperations(LibvirtCalls):
    async def ensure_pool(self, pool: PoolRef) -> None:
        await self._call(lambda conn: storage.ensure_pool(conn, pool))

    async def inspect_image(self, image: ImageRef) -> ImageInfo:
        return await self._call(lambda conn: self._check_image(conn, image)[1])

    async def create_volume(
        self, pool: PoolRef, name: str, size_gib: int, source: ImageRef | None = None, *, linked: bool = False
    ) -> VolumeInfo:
        can_resize = Capability.VOLUME_RESIZE in self.capabilities

        def create(conn: Any) -> VolumeInfo:
            vol, capacity = None, 0
            if source is not None:
                vol, info = self._check_image(conn, source)
                capacity = info.virtual_size_bytes
            return storage.create_volume(
                conn, pool, name, size_gib, vol, capacity, can_resize=can_resize, linked=linked
            )

        return await self._call(create)

    async def upload_volume(self, pool: PoolRef, name: str, data: bytes) -> VolumeInfo:
        streams = self.flavor.volume_streams
        return await self._call(
            lambda conn: storage.upload_volume(conn, pool, name, data, can_stream=streams)
        )

    async def write_image(self, image: ImageRef, source: str) -> None:
        streams = self.flavor.volume_streams
        await self._call(lambda conn: images.write_image(conn, image, source, can_stream=streams))

    async def delete_volume(self, pool: PoolRef, name: str) -> None:
        await self._call(lambda conn: storage.delete_volume(conn, pool, name))

    async def resize_volume(self, pool: PoolRef, name: str, size_gib: int) -> VolumeInfo:
        self._require(Capability.VOLUME_RESIZE)
        return await self._call(lambda conn: storage.resize_volume(conn, pool, name, size_gib))

    def _check_image(self, conn: Any, image: ImageRef) -> tuple[Any, ImageInfo]:
        return images.check_image(conn, image, local_view=self.flavor.local_view)
