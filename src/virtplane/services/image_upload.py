"""Images into a library through the API: an upload's bytes (or a URL's) become a file on every
host of the library pool, written through each host's driver, and an Image that names it.

The content is received into a private file on the control plane first, hashed as it comes,
and checked there against the SHA-256 the client gave, its length and its declared format,
so a corrupted or mislabelled upload is refused before any host is touched. Only then is it
written to the hosts, one after the other, through libvirt's volume upload (so a library the
control plane does not see works too); if a host's write fails, the copies already written
are deleted again and nothing is recorded. The Image is created last, naming the file and
what was uploaded (``spec.upload``): the file is virtplane's own, in its own namespace
(``vp-image-NAME.FORMAT``), so a retry after a crash in between replaces its own copies
and never an admin's file.

The quota (``images.library_max_gib``, per library) counts the files of the Images in the
library and is checked before the body is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.scheduling import pool_hosts
from virtplane.controllers.storage import library_ref
from virtplane.domain.base import Metadata
from virtplane.domain.errors import Invalid, Refused, TooLarge
from virtplane.domain.images import PROBE_BYTES, probe_format, uploaded_image_file
from virtplane.domain.resources import (
    EventType,
    HostConnection,
    Image,
    ImageFormat,
    ImageKind,
    ImageSpec,
    ImageUpload,
    PoolContent,
    StoragePool,
)
from virtplane.domain.resources.image import IMAGE_FILES_FINALIZER
from virtplane.drivers.base import HypervisorDriver, PoolRef
from virtplane.drivers.errors import DriverError
from virtplane.services.image_ova import is_ova, read_ova

__all__ = ["ImageUploads", "UploadPlan", "convert_to_qcow2", "digest_of"]

log = logging.getLogger("virtplane.services.image_upload")

GIB = 1024**3
CONVERTED = ("vmdk", "ova")
"""What an import converts to a qcow2 Image: a VMDK, or an OVA's one VMDK disk."""


@dataclass(frozen=True)
class UploadPlan:
    image: Image
    """What will be created once every host has the file (spec only)."""
    pool: StoragePool
    hosts: tuple[str, ...]
    size_bytes: int
    origin: str = ""
    """Where the file came from when it is not what was sent (an OVA's disk), for the Image's event."""


class ImageUploads:
    def __init__(self, ctx: ControllerContext, spool_dir: Path | None = None) -> None:
        self.ctx = self._ctx = ctx
        self.spool_dir = spool_dir
        """Where bodies are received before they are checked (None: the system's temporary directory)."""
        self._in_flight: dict[str, UploadPlan] = {}
        """Uploads this server is receiving or writing, by Image name: one at a time per name (two
        would write the same files), and their sizes count against the quota already."""

    # ------------------------------------------------------------------ before the body

    def plan(
        self, name: str, pool_name: str, kind: ImageKind, fmt: ImageFormat | None, sha256: str, size: int
    ) -> UploadPlan:
        """Everything that can be refused before a byte is read; raises the domain's errors."""
        ctx = self._ctx
        if ctx.store.find(Image, name) is not None:
            raise Refused("AlreadyExists", f"image {name} already exists; delete it first to upload again")
        pool = ctx.store.find(StoragePool, pool_name)
        if pool is None:
            raise Invalid("PoolNotFound", f"storage pool {pool_name} does not exist")
        if pool.spec.content is not PoolContent.IMAGES:
            raise Invalid("NotAnImageLibrary", f"storage pool {pool_name} is not an image library")
        if size < 1:
            raise Invalid("EmptyUpload", "the upload is empty")
        declared = ImageSpec(pool=pool_name, file=uploaded_image_file(name, "new"), kind=kind, format=fmt)
        effective = declared.effective_format  # kind and format agree (else a 422 ValidationError)
        spec = declared.model_copy(
            update={
                "file": uploaded_image_file(name, effective.value),
                "format": effective,
                "upload": ImageUpload(sha256=sha256, size_bytes=size),
            }
        )
        self.check_quota(pool, size)
        hosts = sorted(pool_hosts(ctx.cache, pool))
        if not hosts:
            raise Refused("NoHosts", f"no host sees library pool {pool_name}")
        away = [h for h in hosts if not _connected(ctx, h)]
        if away:
            raise Refused(
                "HostsNotConnected",
                f"host {', '.join(away)} of library pool {pool_name} is not connected; the file "
                "must reach every host of the pool",
            )
        image = Image(metadata=Metadata(name=name, finalizers=[IMAGE_FILES_FINALIZER]), spec=spec)
        return UploadPlan(image=image, pool=pool, hosts=tuple(hosts), size_bytes=size)

    def check_quota(self, pool: StoragePool, size: int) -> None:
        limit_gib = self._ctx.settings.get_int("images.library_max_gib")
        if limit_gib <= 0:
            return
        held = sum(
            image.spec.upload.size_bytes
            for image in self._ctx.store.list_objects(Image)
            if image.spec.pool == pool.metadata.name and image.spec.upload is not None
        ) + sum(p.size_bytes for p in self._in_flight.values() if p.pool.metadata.name == pool.metadata.name)
        if held + size > limit_gib * GIB:
            raise TooLarge(
                "LibraryQuotaExceeded",
                f"library pool {pool.metadata.name} holds {held} bytes of uploaded images; "
                f"{size} more would pass its quota of {limit_gib} GiB (setting images.library_max_gib)",
            )

    # ------------------------------------------------------------------ the body

    @contextlib.asynccontextmanager
    async def spooled(self, plan: UploadPlan, chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
        """The body in a private file, once its size and SHA-256 are the plan's; removed after.
        One body at a time per Image name, counted against the quota while it is here."""
        name = plan.image.metadata.name
        if name in self._in_flight:
            raise Refused("UploadInProgress", f"image {name} is being uploaded already")
        self._in_flight[name] = plan
        descriptor, path = tempfile.mkstemp(prefix=".image-upload-", dir=self.spool_dir)
        try:
            with os.fdopen(descriptor, "wb") as spool:
                digest, size = await _spool(chunks, spool, plan.size_bytes)
            _check_digest(plan, digest, size)
            yield path
        finally:
            self._in_flight.pop(name, None)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    @contextlib.asynccontextmanager
    async def received(
        self, plan: UploadPlan, chunks: AsyncIterable[bytes], *, convert_vmdk: bool = False
    ) -> AsyncIterator[tuple[str, UploadPlan]]:
        """The content in a private file, checked (size, SHA-256, format), and the plan for it;
        removed after. ``convert_vmdk``: a VMDK for a qcow2 Image is converted (``qemu-img``),
        and the plan then records the converted file."""
        name = plan.image.metadata.name
        async with self.spooled(plan, chunks) as path:
            converted, extracted = path + ".qcow2", path + ".vmdk"
            try:
                found = self._check_content(plan, path, convert_vmdk=convert_vmdk)
                if found in CONVERTED:
                    source, origin = path, ""
                    if found == "ova":  # its one disk, a VMDK, is what the Image gets
                        appliance = await asyncio.to_thread(read_ova, path, extracted)
                        source, origin = extracted, appliance.describe()
                    await convert_to_qcow2(source, converted)
                    digest, size = await asyncio.to_thread(digest_of, converted)
                    del self._in_flight[name]  # the converted file counts instead
                    self._in_flight[name] = replanned = self._replanned(plan, digest, size, origin)
                    yield converted, replanned
                else:
                    yield path, plan
            finally:
                for leftover in (converted, extracted):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(leftover)

    def _check_content(self, plan: UploadPlan, path: str, *, convert_vmdk: bool) -> str:
        """The content's format, once it is what the plan says (or a VMDK to convert)."""
        with open(path, "rb") as file:
            head = file.read(PROBE_BYTES)
        found = "ova" if is_ova(head) else probe_format(head)
        declared = plan.image.spec.effective_format.value
        if found != declared and not (convert_vmdk and found in CONVERTED and declared == "qcow2"):
            raise Invalid("WrongFormat", f"the content is {found}, not {declared}: nothing was written")
        return found

    def _replanned(self, plan: UploadPlan, digest: str, size: int, origin: str) -> UploadPlan:
        """The plan for the converted file: its own digest and size, within the quota too."""
        self.check_quota(plan.pool, size)
        spec = plan.image.spec.model_copy(update={"upload": ImageUpload(sha256=digest, size_bytes=size)})
        image = plan.image.model_copy(update={"spec": spec})
        return UploadPlan(image=image, pool=plan.pool, hosts=plan.hosts, size_bytes=size, origin=origin)

    # ------------------------------------------------------------------ the hosts

    async def write(self, plan: UploadPlan, path: str, principal: str) -> Image:
        """The checked file on every host of the library, then the Image; nothing left on failure."""
        ctx = self._ctx
        ref = library_ref(plan.image, plan.pool)
        written: list[HypervisorDriver] = []
        try:
            for host_name in plan.hosts:
                host = ctx.cache.host(host_name)
                if host is None:
                    raise Refused("HostsNotConnected", f"host {host_name} does not exist any more")
                driver = await ctx.hosts.get(host.spec.uri)
                await driver.ensure_pool(ref.pool)
                written.append(driver)
                await driver.write_image(ref, path)
                await driver.inspect_image(ref)  # the host reads it back as the format it was given
            name = plan.image.metadata.name
            created = ctx.store.create(
                plan.image,
                events=[(Image.KIND, name, "Uploaded", _uploaded(principal, plan), EventType.NORMAL)],
            )
        except BaseException as exc:
            await _forget(written, ref.pool, ref.file)
            if isinstance(exc, DriverError):
                raise Refused("UploadFailed", f"writing the image to the hosts failed: {exc}") from exc
            raise
        log.info("image %s uploaded to %s", created.metadata.name, ", ".join(plan.hosts))
        return created


def _uploaded(principal: str, plan: UploadPlan) -> str:
    return f"uploaded by {principal}" + (f", {plan.origin}" if plan.origin else "")


def _check_digest(plan: UploadPlan, digest: str, size: int) -> None:
    upload = plan.image.spec.upload
    assert upload is not None
    if size != plan.size_bytes:
        raise Invalid("IncompleteUpload", f"received {size} bytes of {plan.size_bytes}")
    if digest != upload.sha256:
        raise Invalid(
            "ChecksumMismatch",
            f"the content's SHA-256 is {digest}, not {upload.sha256}: nothing was written",
        )


def _connected(ctx: ControllerContext, name: str) -> bool:
    host = ctx.cache.host(name)
    return host is not None and host.status.connection is HostConnection.UP


async def _spool(chunks: AsyncIterable[bytes], spool: BinaryIO, limit: int) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise Invalid("IncompleteUpload", f"the body is longer than the {limit} bytes announced")
        digest.update(chunk)
        await asyncio.to_thread(spool.write, chunk)
    return digest.hexdigest(), size


async def convert_to_qcow2(source: str, target: str) -> int:
    """A VMDK (from an OVA or a VMware export) into qcow2, with QEMU's own converter; its virtual
    size. A VMDK that names any file but itself (extents, a parent) is refused: its names are
    the sender's, and would be read on the server."""
    info = json.loads(await _qemu_img("info", "--output=json", "-f", "vmdk", source))
    extents = info.get("format-specific", {}).get("data", {}).get("extents", [])
    if info.get("backing-filename") or any(e.get("filename") != source for e in extents):
        raise Invalid("ConversionFailed", "the VMDK refers to other files; only a VMDK of one file is taken")
    await _qemu_img("convert", "-q", "-f", "vmdk", "-O", "qcow2", source, target)
    return int(info.get("virtual-size", 0))


async def _qemu_img(*args: str) -> bytes:
    try:
        process = await asyncio.create_subprocess_exec(
            "qemu-img", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
    except FileNotFoundError:
        raise Refused("ConversionUnavailable", "qemu-img is not installed on the server") from None
    output, error = await process.communicate()
    if process.returncode != 0:
        why = error.decode(errors="replace").strip().splitlines()[-1:] or ["failed"]
        raise Invalid("ConversionFailed", f"the VMDK could not be converted to qcow2: {why[0]}")
    return output


def digest_of(path: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as file:
        while chunk := file.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


async def _forget(drivers: list[HypervisorDriver], pool: PoolRef, file: str) -> None:
    """Delete what a failed upload wrote (shielded: a cancelled request cleans up too)."""
    for driver in drivers:
        try:
            await asyncio.shield(driver.delete_volume(pool, file))
        except Exception as exc:  # reported: the upload's own error is the answer
            log.warning("could not delete %s after a failed upload on %s: %s", file, driver.uri, exc)
