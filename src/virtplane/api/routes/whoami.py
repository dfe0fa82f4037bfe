"""``GET /v1/whoami``: the caller's name and role, so that a client shows only what it may do."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from virtplane.api.auth import Principal, Role, require

router = APIRouter(tags=["Health"])


class WhoAmI(BaseModel):
    name: str
    role: Role


@router.get("/v1/whoami", operation_id="whoami", summary="The caller's name and role (any valid token)")
def whoami(principal: Principal = Depends(require(Role.VIEWER))) -> WhoAmI:
    return WhoAmI(name=principal.name, role=principal.role)
