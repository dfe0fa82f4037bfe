"""``PUT /v1/images/{name}/content`` (admin): an Image made from uploaded bytes.

The body is the file itself (``application/octet-stream``, with its Content-Length); the
query gives the library pool, the kind and format, and the SHA-256 the server checks before
any host is written (``services.image_upload``). A refused or failed upload leaves nothing
behind, so a retry starts clean: the same request again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.requests import ClientDisconnect

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.api.openapi_errors import ErrorBody
from virtplane.api.shown import public_doc
from virtplane.domain.resources import ImageFormat, ImageKind
from virtplane.domain.resources.image import SHA256_HEX

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
        async with service.received(plan, request.stream()) as path:
            image = await service.write(plan, path, principal.name)
    except ClientDisconnect:  # no one hears this answer; the audit log records it
        raise ApiError(
            400, "UploadCutOff", "the client went away before the whole body came: nothing was written"
        ) from None
    ctx.written(image)
    response.status_code = 201
    return public_doc(image)
