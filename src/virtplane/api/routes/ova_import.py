"""A VM imported from an OVA (admin): ``PUT /v1/vms/actions/import-ova`` with the OVA as the body,
or ``POST /v1/vms/actions/import-ova`` with a URL the server fetches it from.

The OVF gives the VM's name (unless one is given), CPU, memory, disks and NIC count
(``services.ova_import``). Everything that can be refused is refused before a host is
written: the body's SHA-256 and size, the OVF (untrusted XML, the disk files it names),
the conversion of each disk, and the VM as ``vm create`` would admit it (a dry run). Then
each disk becomes an Image in the library and the VM is created (Stopped, Manual; with
``start``, AlwaysOnUnlessStoppedManually), its volumes copies of those Images in ``pool``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import Field
from starlette.requests import ClientDisconnect

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.api.openapi_errors import ErrorBody
from virtplane.api.routes.images import uploads
from virtplane.api.routes.vm_create import CreatedVMs, CreateVMs, VolumeBlueprint, create_vms_as
from virtplane.api.shown import public_doc
from virtplane.domain.base import Name, Strict
from virtplane.domain.names import IMPORT_URL
from virtplane.domain.resources import Image, RunPolicy, VolumeSource, VolumeSpec
from virtplane.domain.resources.image import SHA256_HEX
from virtplane.services.image_import import fetched
from virtplane.services.ova_import import OvaImports, OvaRequest, PreparedOva

router = APIRouter(tags=["VirtualMachine"])

RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorBody,
        "description": "The VM, a volume or an Image of its disks exists, or a host is away.",
    },
    413: {"model": ErrorBody, "description": "The library's quota (reason LibraryQuotaExceeded)."},
    422: {
        "model": ErrorBody,
        "description": "The OVA is not what was declared or cannot be taken (ChecksumMismatch, InvalidOva, "
        "ConversionFailed, NetworkRequired, ...): nothing was written.",
    },
}


class OvaFromUrl(Strict):
    """An OVA the server fetches, and what the VM made from it gets."""

    url: str = Field(pattern=IMPORT_URL.anchored, max_length=4096, description="An http(s) URL of the OVA.")
    sha256: str = Field(pattern=SHA256_HEX, description="The OVA's SHA-256 as published (lowercase hex).")
    pool: Name = Field(description="The volume pool the VM's disks go to.")
    name: Name | None = Field(default=None, description="The VM's name; default: the OVF's.")
    networks: list[Name] = Field(
        default_factory=list, max_length=16, description="One network for all the OVF's NICs, or one each."
    )
    library: Name | None = Field(
        default=None, description="The image library the disks go through (default: the only one)."
    )
    start: bool = Field(default=False, description="Start the VM (AlwaysOnUnlessStoppedManually).")


def creation(prepared: PreparedOva, request: OvaRequest, *, from_images: bool) -> CreateVMs:
    """What ``vm create`` is asked for: the OVF's VM, its disks copies of the Images (or, for the
    dry run before they exist, empty volumes of the same pool and sizes)."""
    volumes = [
        VolumeBlueprint(
            suffix=f"disk{index}",
            spec=VolumeSpec(
                pool=request.pool,
                size_gib=disk.size_gib,
                source=VolumeSource(image=disk.plan.image.metadata.name) if from_images else None,
            ),
            boot_order=1 if index == 0 else None,
        )
        for index, disk in enumerate(prepared.disks)
    ]
    spec: dict[str, Any] = {
        "cpu": prepared.appliance.cpu,
        "memory_mib": prepared.appliance.memory_mib,
        "nics": [{"network": network} for network in prepared.nics],
    }
    policy = RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY if request.start else RunPolicy.MANUAL
    return CreateVMs(names=[prepared.name], spec=spec, volumes=volumes, run_policy=policy)


async def imported(
    ctx: ApiContext, request: OvaRequest, size: int, chunks: AsyncIterable[bytes], principal: Principal
) -> CreatedVMs:
    service = OvaImports(uploads(ctx))
    plan = service.plan(request, size)
    async with service.prepared(request, plan, chunks) as prepared:
        await create_vms_as(ctx, creation(prepared, request, from_images=False), True, principal)
        images: list[Image] = []
        try:
            for disk in prepared.disks:
                image = await service.uploads.write(disk.plan, disk.path, principal.name)
                ctx.written(image)
                images.append(image)
            await service.ready(images)
            made = await create_vms_as(ctx, creation(prepared, request, from_images=True), False, principal)
        except BaseException:
            for image in images:  # its finalizer takes its files from the hosts
                ctx.store.delete(Image, image.metadata.name)
            raise
    made.items[:0] = [public_doc(image) for image in images]
    return made


@router.put(
    "/v1/vms/actions/import-ova",
    operation_id="import_vm_from_ova_upload",
    summary="Create a VM from an uploaded OVA: its OVF's CPU, memory, disks and NICs (admin)",
    status_code=201,
    response_model=CreatedVMs,
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/octet-stream": {"schema": {}}}}
    },
    responses={411: {"model": ErrorBody, "description": "No Content-Length."}, **RESPONSES},
)
async def import_ova_upload(
    request: Request,
    pool: str = Query(..., description="The volume pool the VM's disks go to."),
    sha256: str = Query(..., pattern=SHA256_HEX, description="The OVA's SHA-256, in lowercase hex."),
    name: str | None = Query(None, description="The VM's name; default: the OVF's."),
    network: list[str] = Query([], description="One network for all the OVF's NICs, or one each (repeated)."),
    library: str | None = Query(None, description="The image library the disks go through."),
    start: bool = Query(False, description="Start the VM."),
    principal: Principal = Depends(require(Role.ADMIN)),
) -> CreatedVMs:
    ctx: ApiContext = request.app.state.ctx
    length = request.headers.get("content-length", "")
    if not length.isdigit():
        raise ApiError(411, "LengthRequired", "an upload needs its Content-Length")
    wanted = OvaRequest(pool, sha256, name, tuple(network), library, start)
    try:
        return await imported(ctx, wanted, int(length), request.stream(), principal)
    except ClientDisconnect:
        raise ApiError(
            400, "UploadCutOff", "the client went away before the whole body came: nothing was written"
        ) from None


@router.post(
    "/v1/vms/actions/import-ova",
    operation_id="import_vm_from_ova_url",
    summary="Create a VM from an OVA the server fetches from an HTTP(S) URL (admin)",
    status_code=201,
    response_model=CreatedVMs,
    responses=RESPONSES,
)
async def import_ova_url(
    body: OvaFromUrl, request: Request, principal: Principal = Depends(require(Role.ADMIN))
) -> CreatedVMs:
    ctx: ApiContext = request.app.state.ctx
    wanted = OvaRequest(body.pool, body.sha256, body.name, tuple(body.networks), body.library, body.start)
    OvaImports(uploads(ctx)).plan(wanted, 1)  # all but the size, before a fetch
    async with fetched(body.url) as (length, chunks):
        return await imported(ctx, wanted, length, chunks, principal)


__all__ = ["router"]
