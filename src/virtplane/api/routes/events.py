"""The audit trail (read-only) and API tokens."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.domain.resources import KIND_BY_NAME, KIND_BY_PLURAL, Name

router = APIRouter()


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


@router.get("/v1/events", tags=["Event"], operation_id="list_events", summary="Events, oldest first")
def list_events(
    request: Request,
    kind: str | None = Query(
        default=None, max_length=64, description="Kind or plural, e.g. VirtualMachine or vms"
    ),
    name: str | None = Query(default=None, max_length=255),
    after_id: int = Query(
        default=0, ge=0, le=2**63 - 1, description="Only events with a larger id (for following)"
    ),
    limit: int = Query(default=100, ge=1, le=5000),
    _: Principal = Depends(require(Role.VIEWER)),
) -> dict[str, Any]:
    if kind is not None:
        cls = KIND_BY_PLURAL.get(kind) or KIND_BY_NAME.get(kind)
        kind = cls.KIND if cls is not None else kind
    events = _ctx(request).store.list_events(kind=kind, name=name, after_id=after_id, limit=limit)
    return {"items": [e.model_dump(mode="json") for e in events]}


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    role: Role = Field(description="admin, operator or viewer")


class TokenResponse(BaseModel):
    name: str
    role: Role
    token: str


@router.post(
    "/v1/tokens", tags=["Token"], operation_id="create_tokens", status_code=201, summary="Create an API token"
)
def create_token(
    request: Request, body: TokenRequest, principal: Principal = Depends(require(Role.ADMIN))
) -> TokenResponse:
    ctx = _ctx(request)
    token = ctx.store.create_token(body.name, body.role.value)
    ctx.store.record_event("Token", body.name, "Created", f"role {body.role.value}, by {principal.name}")
    return TokenResponse(name=body.name, role=body.role, token=token)
