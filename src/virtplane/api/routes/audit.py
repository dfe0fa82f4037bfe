"""The audit log (admin): who wrote what, from where, when, and the outcome (``virtplane.api.audit``)."""

from __future__ import annotations

import json
from datetime import datetime

from fastapi import APIRouter, Depends, Query, Request, Response

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.api.lists import MAX_LIMIT, MAX_TOKEN, decode_continue, encode_continue, list_response
from virtplane.domain.resources import KIND_BY_NAME, KIND_BY_PLURAL

router = APIRouter(tags=["Audit"])


@router.get(
    "/v1/audit",
    operation_id="list_audit",
    summary="Audit records, oldest first: every write and console session, who made it and its outcome",
    response_class=Response,
)
def list_audit(
    request: Request,
    since: datetime | None = Query(default=None, description="Only records at or after this time (ISO 8601)"),
    kind: str | None = Query(
        default=None, max_length=64, description="Kind or plural, e.g. VirtualMachine or vms"
    ),
    name: str | None = Query(default=None, max_length=255),
    limit: int = Query(default=100, ge=1, le=MAX_LIMIT),
    continue_token: str | None = Query(
        None, alias="continue", max_length=MAX_TOKEN, description="metadata.continue of the previous page."
    ),
    _: Principal = Depends(require(Role.ADMIN)),
) -> Response:
    ctx: ApiContext = request.app.state.ctx
    if since is not None and since.tzinfo is None:
        raise ApiError(422, "Invalid", "since: give a time with its zone, e.g. 2026-01-01T00:00:00Z")
    if kind is not None:
        cls = KIND_BY_PLURAL.get(kind) or KIND_BY_NAME.get(kind)
        kind = cls.KIND if cls is not None else kind
    after = decode_continue(continue_token, "Audit", int)[0] if continue_token else 0
    records = ctx.store.audit_records(since=since, after_id=after, kind=kind, name=name, limit=limit + 1)
    page = records[:limit]
    next_token = encode_continue("Audit", page[-1].id, 0) if len(records) > limit else None
    return list_response([_json(entry.document()) for entry in page], next_token, 0)


def _json(document: dict[str, object]) -> str:
    return json.dumps(document)
