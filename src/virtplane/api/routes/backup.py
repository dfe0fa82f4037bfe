"""``GET /v1/backup`` (admin): a consistent copy of a running server's SQLite store.

The copy is made with SQLite's online backup API (``store.backup``) into a private file
beside the database, which is unlinked once open and streamed from the open file: writers
go on meanwhile, and nothing of the copy outlives the request. A PostgreSQL store is
refused (409) with how to back it up instead: ``pg_dump``, not run from here (see
docs/decisions.md, "Restoring the control plane from a backup").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import BinaryIO

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.api.openapi_errors import ErrorBody
from virtplane.store.backup import POSTGRES_BACKUP, private_copy, sqlite_path

log = logging.getLogger("virtplane.api.backup")

router = APIRouter(tags=["Backup"])

MEDIA_TYPE = "application/vnd.sqlite3"
CHUNK_BYTES = 1024 * 1024


def _chunks(copy: BinaryIO) -> Iterator[bytes]:
    with copy:
        while chunk := copy.read(CHUNK_BYTES):
            yield chunk


@router.get(
    "/v1/backup",
    operation_id="backup_store",
    summary="A consistent copy of the store, taken while the server runs (admin; SQLite stores)",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {MEDIA_TYPE: {}},
            "description": "The SQLite database: put it in place as DATA_DIR/virtplane.db of a stopped "
            "server to restore it (docs/backup-and-restore.md).",
        },
        403: {"model": ErrorBody, "description": "Only admins may copy the store (reason Forbidden)."},
        409: {
            "model": ErrorBody,
            "description": "The store is not a SQLite file (PostgreSQL: use pg_dump; reason "
            "BackupNotSupported).",
        },
    },
)
def backup_store(request: Request, principal: Principal = Depends(require(Role.ADMIN))) -> StreamingResponse:
    ctx: ApiContext = request.app.state.ctx
    url = ctx.store.url
    source = sqlite_path(url)
    if source is None:
        why = POSTGRES_BACKUP if url.startswith("postgresql") else "the store is not a SQLite file"
        raise ApiError(409, "BackupNotSupported", why)
    copy = private_copy(source, source.parent)
    size = copy.seek(0, 2)
    copy.seek(0)
    log.info("store backup of %d bytes for %s", size, principal.name)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return StreamingResponse(
        _chunks(copy),
        media_type=MEDIA_TYPE,
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="virtplane-{stamp}.db"',
            "Cache-Control": "no-store",
        },
    )
