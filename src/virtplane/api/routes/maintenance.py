"""Host maintenance under its host: POST (ask, dry run, retry), GET (show), DELETE (cancel).

Admin only for writes; any role reads. The work is done by the maintenance service
(``services.maintenance``) handed in through the API context; its refusals are domain
errors, which ``api.errors`` maps to HTTP statuses.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.domain.resources import MaintenanceStrategy
from virtplane.services.maintenance import MaintenanceService

router = APIRouter(tags=["Host"])


class MaintenanceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    strategy: MaintenanceStrategy | None = Field(
        default=None,
        description="For running VMs with local disks: Error, Migration, ForceStop or Stop. "
        "Default: the setting host.maintenance.local.storage.strategy.",
    )
    dry_run: bool = Field(default=False, description="Only compute and return the plan; change nothing.")


def _service(request: Request) -> MaintenanceService:
    ctx: ApiContext = request.app.state.ctx
    if ctx.maintenance is None:
        raise ApiError(503, "MaintenanceUnavailable", "this server runs no maintenance controller")
    return ctx.maintenance


async def _call(request: Request, fn: Any, *args: Any) -> dict[str, Any]:
    ctx: ApiContext = request.app.state.ctx
    if ctx.catch_up is not None:
        # plan from current data: on a follower the cache trails the leader's writes by a poll
        await ctx.catch_up()
    result: dict[str, Any] = fn(*args)
    return result


# async routes: the service reads the controllers' in-memory cache, which lives on the loop


@router.post(
    "/v1/hosts/{name}/maintenance",
    operation_id="request_maintenance",
    summary="Put a host into maintenance (or retry it, or only plan it with dry_run)",
)
async def request_maintenance(
    name: str,
    request: Request,
    body: MaintenanceRequest = Body(default_factory=MaintenanceRequest),
    principal: Principal = Depends(require(Role.ADMIN)),
) -> dict[str, Any]:
    return await _call(request, _service(request).request, name, body.strategy, body.dry_run, principal.name)


@router.get(
    "/v1/hosts/{name}/maintenance", operation_id="get_maintenance", summary="Show a host's maintenance"
)
async def get_maintenance(
    name: str, request: Request, _: Principal = Depends(require(Role.VIEWER))
) -> dict[str, Any]:
    return await _call(request, _service(request).show, name)


@router.delete(
    "/v1/hosts/{name}/maintenance",
    operation_id="cancel_maintenance",
    summary="Cancel a host's maintenance: the host returns to Enabled",
)
async def cancel_maintenance(
    name: str,
    request: Request,
    return_vms: bool | None = Query(
        default=None,
        description="Migrate back the VMs that left the host. Default: the setting host.maintenance.return_vms.",
    ),
    principal: Principal = Depends(require(Role.ADMIN)),
) -> dict[str, Any]:
    return await _call(request, _service(request).cancel, name, principal.name, return_vms)
