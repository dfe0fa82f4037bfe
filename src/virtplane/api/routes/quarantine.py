"""Quarantined objects: stored bodies this release could not read, set aside by the upgrade (admin).

``virtplane.store.quarantine`` says why they exist. An admin reads each one's body and
reason, re-creates what is still wanted, and deletes the quarantined record, which
releases the claims (addresses, MACs) it kept held.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext

router = APIRouter(tags=["Quarantine"])

KindPath = Path(pattern=r"^[A-Za-z][A-Za-z0-9]{0,63}$", description="The object's kind, e.g. VirtualMachine")
NamePath = Path(min_length=1, max_length=255, description="The object's name")
UidQuery = Query(
    default=None,
    min_length=1,
    max_length=36,
    description="Only the quarantined object of this uid (an object made again under the name "
    "may have been quarantined too); without it, every one of the name",
)


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


@router.get(
    "/v1/quarantine",
    operation_id="list_quarantine",
    summary="Stored objects this release could not read: each one's body and the reason",
)
def list_quarantine(request: Request, _: Principal = Depends(require(Role.ADMIN))) -> dict[str, Any]:
    return {"items": [item.document() for item in _ctx(request).store.quarantined()]}


@router.delete(
    "/v1/quarantine/{kind}/{name}",
    operation_id="delete_quarantine",
    summary="Delete a quarantined object for good, releasing the addresses and MACs it held",
)
def delete_quarantine(
    request: Request,
    kind: str = KindPath,
    name: str = NamePath,
    uid: str | None = UidQuery,
    principal: Principal = Depends(require(Role.ADMIN)),
) -> dict[str, Any]:
    deleted = _ctx(request).store.delete_quarantined(kind, name, by=principal.name, uid=uid)
    return {"items": [item.document() for item in deleted]}
