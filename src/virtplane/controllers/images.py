"""Images: each library file an admin names is checked on the hosts that see its pool.

An Image is Ready once a connected host found its file acceptable and none refused
it (``HypervisorDriver.inspect_image``: a regular file inside the library, of the
expected format, with no backing file); Failed when a host refused it or it is
missing. It is checked again periodically, and drivers check it again right before
each use. Status messages carry the driver's words, which name only the library.
"""

from __future__ import annotations

import logging

from virtplane.controllers.context import ControllerContext, Removal
from virtplane.controllers.host import reachability_changed
from virtplane.controllers.registration import Registration
from virtplane.controllers.scheduling import pool_hosts
from virtplane.controllers.storage import library_ref
from virtplane.controllers.watch import Watch, itself, name_of
from virtplane.domain.resources import (
    Host,
    HostConnection,
    Image,
    ImagePhase,
    ImageStatus,
    PoolContent,
    Resource,
    StoragePool,
)
from virtplane.domain.resources.image import IMAGE_FILES_FINALIZER
from virtplane.drivers.errors import DriverError, ImageRefused, NotFound, PermanentError, TransientError
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache

log = logging.getLogger("virtplane.controllers.images")

GIB = 1024**3
RECHECK_READY_S = 300.0
RECHECK_FAILED_S = 30.0
RECHECK_PENDING_S = 5.0


class ImageReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        image = ctx.read(Image, req.name, to_change=True)
        if image is None:
            return None
        if image.metadata.deletion_requested_at is not None:
            return await self._delete_files(image)
        status, retry = await self._check(image)
        status.observed_generation = image.metadata.generation
        if status != image.status:
            became = status.phase is not image.status.phase
            image.status = status
            if became:
                ctx.event(
                    image, status.phase.value, status.message, warning=status.phase is ImagePhase.FAILED
                )
            await ctx.write(image)
        return Result(requeue_after=retry)

    async def _delete_files(self, image: Image) -> Result | None:
        """An uploaded Image's files go from every host of its library (a file virtplane wrote);
        while a host is away the Image waits, so no copy is left behind on it."""
        ctx = self.ctx
        pool = ctx.read(StoragePool, image.spec.pool)
        if IMAGE_FILES_FINALIZER in image.metadata.finalizers and pool is not None:
            ref = library_ref(image, pool)
            for host_name in sorted(pool_hosts(ctx.cache, pool)):
                host = ctx.cache.host(host_name)
                if host is None:
                    continue  # gone from the fleet, and its library with it
                try:
                    driver = await ctx.hosts.get(host.spec.uri)
                    await driver.delete_volume(ref.pool, ref.file)
                except NotFound:
                    continue  # the host has no such library: nothing of ours there
                except DriverError as exc:  # away, or busy: again later
                    log.info("image %s: files not deleted on %s yet: %s", image.metadata.name, host_name, exc)
                    return Result(requeue_after=RECHECK_PENDING_S)
        if IMAGE_FILES_FINALIZER in image.metadata.finalizers:
            image.metadata.finalizers.remove(IMAGE_FILES_FINALIZER)
            image = await ctx.write(image)
        if not image.metadata.finalizers:
            await ctx.write(Removal(Image, image.metadata.name))
        return None

    async def _check(self, image: Image) -> tuple[ImageStatus, float]:
        ctx = self.ctx
        pool = ctx.read(StoragePool, image.spec.pool)
        if pool is None:
            return _status(
                ImagePhase.PENDING, f"library pool {image.spec.pool} does not exist"
            ), RECHECK_PENDING_S
        if pool.spec.content is not PoolContent.IMAGES:
            return _status(
                ImagePhase.FAILED, f"pool {pool.metadata.name} is not an image library (spec.content: images)"
            ), RECHECK_FAILED_S
        ref = library_ref(image, pool)
        found: list[str] = []
        size = virtual = 0
        for host_name in sorted(pool_hosts(ctx.cache, pool)):
            host = ctx.cache.host(host_name)
            if host is None or host.status.connection is not HostConnection.UP:
                continue
            try:
                driver = await ctx.hosts.get(host.spec.uri)
                await driver.ensure_pool(ref.pool)
                info = await driver.inspect_image(ref)
            except (ImageRefused, NotFound, PermanentError) as exc:
                return _status(ImagePhase.FAILED, f"on host {host_name}: {exc}"), RECHECK_FAILED_S
            except TransientError as exc:
                log.info("image %s not checked on %s: %s", image.metadata.name, host_name, exc)
                continue
            found.append(host_name)
            size, virtual = info.size_bytes, info.virtual_size_bytes
        if not found:
            return _status(
                ImagePhase.PENDING, f"no connected host sees library pool {pool.metadata.name}"
            ), RECHECK_PENDING_S
        status = _status(ImagePhase.READY, "")
        status.hosts = found
        status.size_bytes = size
        status.virtual_size_gib = -(-virtual // GIB)
        return status, RECHECK_READY_S


def _status(phase: ImagePhase, message: str) -> ImageStatus:
    return ImageStatus(phase=phase, message=message)


# --------------------------------------------------------------------------- watches


def _images_in_pool(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    pool = name_of(old, new)
    return [Request(Image.KIND, i.metadata.name) for i in cache.images() if i.spec.pool == pool]


def _every_image(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A host that came, went away or came back may see a library, or no longer."""
    if not reachability_changed(old, new):
        return []
    return [Request(Image.KIND, i.metadata.name) for i in cache.images()]


WATCHES = (
    itself(Image.KIND),
    Watch(StoragePool.KIND, _images_in_pool),
    Watch(Host.KIND, _every_image),
)

CONTROLLER = Registration(Image.KIND, lambda parts: ImageReconciler(parts.ctx), WATCHES, workers=2)
