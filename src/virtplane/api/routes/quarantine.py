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
from virtplane.domain.names import KIND
from virtplane.domain.resources import Secret
from virtplane.store.quarantine import Quarantined

router = APIRouter(tags=["Quarantine"])

KindPath = Path(pattern=KIND.anchored, description="The object's kind, e.g. VirtualMachine")
NamePath = Path(min_length=1, max_length=255, description="The object's name")
UidQuery = Query(
    default=None,
    min_length=1,
    max_length=36,
    description="Only the quarantined object of this uid (an object made again under the name "
    "may have been quarantined too); without it, every one of the name",
)


def _shown(item: Quarantined) -> dict[str, Any]:
    """As the API shows it; of a Secret (write-only: its password is never returned) only the
    metadata and username: a body no model reads may hold the password anywhere."""
    doc = item.document()
    if item.kind == Secret.KIND:
        body: dict[str, Any] = doc["body"] if isinstance(doc["body"], dict) else {}
        spec: dict[str, Any] = body["spec"] if isinstance(body.get("spec"), dict) else {}
        username = spec.get("username")
        doc["body"] = {
            "metadata": body.get("metadata"),
            "spec": {"username": username if isinstance(username, str) else None},
            "withheld": "the rest of a Secret's stored body is not returned (write-only)",
        }
    return doc


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


@router.get(
    "/v1/quarantine",
    operation_id="list_quarantine",
    summary="Stored objects this release could not read: each one's body and the reason",
)
def list_quarantine(request: Request, _: Principal = Depends(require(Role.ADMIN))) -> dict[str, Any]:
    return {"items": [_shown(item) for item in _ctx(request).store.quarantined()]}


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
    return {"items": [_shown(item) for item in deleted]}
