"""``PUT /v1/images/{name}/content`` (admin): an Image made from uploaded bytes.

The body is the file itself (``application/octet-stream``, with its Content-Length); the
query gives the library pool, the kind and format, and the SHA-256 the server checks before
any host is written (``services.image_upload``). A refused or failed upload leaves nothing
behind, so a retry starts clean: the same request again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import ClientDisconnect

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.api.openapi_errors import ErrorBody
from virtplane.api.shown import public_doc
from virtplane.domain.base import Name
from virtplane.domain.names import IMPORT_URL
from virtplane.domain.resources import ImageFormat, ImageKind
from virtplane.domain.resources.image import SHA256_HEX
from virtplane.services.image_import import fetched

if TYPE_CHECKING:
    from virtplane.services.image_upload import ImageUploads

router = APIRouter(tags=["Images"])


def uploads(ctx: ApiContext) -> ImageUploads:
    if ctx.images is None:
        raise ApiError(501, "NotImplemented", "this server does not take image uploads")
    return ctx.images


@router.put(
    "/v1/images/{name}/content",
    operation_id="upload_image",
    summary="Upload a file into an image library as a new Image (admin)",
    status_code=201,
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/octet-stream": {"schema": {}}}}
    },
    responses={
        409: {"model": ErrorBody, "description": "The Image exists, or a host of the pool is away."},
        411: {"model": ErrorBody, "description": "No Content-Length (reason LengthRequired)."},
        413: {"model": ErrorBody, "description": "The library's quota (reason LibraryQuotaExceeded)."},
        422: {
            "model": ErrorBody,
            "description": "The content is not what was declared (ChecksumMismatch, WrongFormat, "
            "IncompleteUpload) or the pool is not a library: nothing was written.",
        },
    },
)
async def upload_image(
    name: str,
    request: Request,
    response: Response,
    pool: str = Query(..., description="The image library (a StoragePool with content: images)."),
    sha256: str = Query(..., pattern=SHA256_HEX, description="The content's SHA-256, in lowercase hex."),
    kind: ImageKind = Query(ImageKind.DISK),
    format: ImageFormat | None = Query(None, description="qcow2 (Disk's default), raw or iso (Iso's)."),
    principal: Principal = Depends(require(Role.ADMIN)),
) -> Any:
    ctx: ApiContext = request.app.state.ctx
    service = uploads(ctx)
    length = request.headers.get("content-length", "")
    if not length.isdigit():
        raise ApiError(411, "LengthRequired", "an upload needs its Content-Length")
    plan = service.plan(name, pool, kind, format, sha256, int(length))
    try:
        async with service.received(plan, request.stream()) as (path, checked):
            image = await service.write(checked, path, principal.name)
    except ClientDisconnect:  # no one hears this answer; the audit log records it
        raise ApiError(
            400, "UploadCutOff", "the client went away before the whole body came: nothing was written"
        ) from None
    ctx.written(image)
    response.status_code = 201
    return public_doc(image)


class ImageImport(BaseModel):
    """Where the server fetches an Image's file from, and what the file must be."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(pattern=IMPORT_URL.anchored, max_length=4096, description="An http(s) URL.")
    sha256: str = Field(pattern=SHA256_HEX, description="The file's SHA-256 as published (lowercase hex).")
    pool: Name = Field(description="The image library (a StoragePool with content: images).")
    kind: ImageKind = ImageKind.DISK
    format: ImageFormat | None = Field(
        default=None,
        description="What the library file is: qcow2 (Disk's default; a VMDK is converted to it), "
        "raw, or iso (Iso's).",
    )


@router.post(
    "/v1/images/{name}/import",
    operation_id="import_image",
    summary="Import a file from an HTTP(S) URL into an image library as a new Image (admin)",
    status_code=201,
    responses={
        409: {"model": ErrorBody, "description": "The Image exists, or a host of the pool is away."},
        413: {"model": ErrorBody, "description": "The library's quota (reason LibraryQuotaExceeded)."},
        422: {
            "model": ErrorBody,
            "description": "The URL could not be fetched (FetchFailed, LengthRequired) or its content is "
            "not what was declared (ChecksumMismatch, WrongFormat, ConversionFailed): nothing was written.",
        },
    },
)
async def import_image(
    name: str, body: ImageImport, request: Request, principal: Principal = Depends(require(Role.ADMIN))
) -> Any:
    ctx: ApiContext = request.app.state.ctx
    service = uploads(ctx)
    service.plan(name, body.pool, body.kind, body.format, body.sha256, 1)  # all but the size, before a fetch
    async with fetched(body.url) as (length, chunks):
        plan = service.plan(name, body.pool, body.kind, body.format, body.sha256, length)
        async with service.received(plan, chunks, convert_vmdk=True) as (path, checked):
            image = await service.write(checked, path, principal.name)
    ctx.written(image)
    return public_doc(image)
