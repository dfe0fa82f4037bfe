"""API tokens (admin): create (the token is shown in this answer only), list, show, revoke.

Revoking takes effect at once: the token's record is kept, marked revoked, and this
process's token cache is emptied, so the token's next request is a 401 that says so.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.domain.resources import Name
from virtplane.store.database import utcnow

router = APIRouter(tags=["Token"])

MAX_LIFETIME_S = 10 * 365 * 86400
NamePath = Path(min_length=1, max_length=255, description="The token's name")


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    role: Role = Field(description="admin, operator or viewer")
    description: str = Field(default="", max_length=1024, description="What the token is for")
    owner: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="The user or service account it belongs to (default: the token's name)",
    )
    expires_in_s: int | None = Field(
        default=None, ge=1, le=MAX_LIFETIME_S, description="Seconds until it expires (default: never)"
    )


@router.post("/v1/tokens", operation_id="create_tokens", status_code=201, summary="Create an API token")
def create_token(
    request: Request, body: TokenRequest, principal: Principal = Depends(require(Role.ADMIN))
) -> dict[str, Any]:
    ctx = _ctx(request)
    expires_at = None if body.expires_in_s is None else utcnow() + timedelta(seconds=body.expires_in_s)
    token = ctx.store.create_token(
        body.name, body.role.value, owner=body.owner, description=body.description, expires_at=expires_at
    )
    ctx.store.record_event("Token", body.name, "Created", f"role {body.role.value}, by {principal.name}")
    return {**ctx.store.token_named(body.name).document(), "token": token}


@router.get("/v1/tokens", operation_id="list_tokens", summary="Every token (never the token itself)")
def list_tokens(request: Request, _: Principal = Depends(require(Role.ADMIN))) -> dict[str, Any]:
    return {"items": [info.document() for info in _ctx(request).store.tokens()]}


@router.get("/v1/tokens/{name}", operation_id="get_tokens", summary="One token (never the token itself)")
def get_token(
    request: Request, name: str = NamePath, _: Principal = Depends(require(Role.ADMIN))
) -> dict[str, Any]:
    return _ctx(request).store.token_named(name).document()


@router.delete(
    "/v1/tokens/{name}",
    operation_id="revoke_tokens",
    summary="Revoke a token: its next request is refused (401 TokenRevoked); it stays listed",
)
def revoke_token(
    request: Request, name: str = NamePath, principal: Principal = Depends(require(Role.ADMIN))
) -> dict[str, Any]:
    ctx = _ctx(request)
    revoked = ctx.store.revoke_token(name, by=principal.name)
    request.app.state.tokens.invalidate()
    ctx.store.record_event("Token", name, "Revoked", f"by {principal.name}")
    return revoked.document()
