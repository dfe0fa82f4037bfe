"""``GET /v1/vms/{name}/placement``: each host's verdict for a live migration of the VM now."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError

router = APIRouter(tags=["VirtualMachine"])


class HostVerdict(BaseModel):
    host: str
    ok: bool = Field(description="True: the host could take the VM now.")
    reason: str = Field(description="Why it could not (the first placement rule it fails); empty when ok.")


class MigrationTargets(BaseModel):
    vm: str
    host: str | None = Field(description="Where the VM is now.")
    phase: str
    copy_storage: bool = Field(description="Its local disks would be copied too (block migration).")
    chosen: str | None = Field(description="The host a Migrate without target_host would pick now.")
    blocked: str = Field(description="Why the VM cannot leave its host at all; empty when it can.")
    hosts: list[HostVerdict]


@router.get(
    "/v1/vms/{name}/placement",
    operation_id="get_vm_placement",
    summary="Each host's verdict (ok, or why not) for live-migrating the VM now",
    responses={404: {"description": "No such VM."}},
)
async def vm_placement(  # async: the service reads the controllers' cache, which lives on the loop
    name: str, request: Request, _: Principal = Depends(require(Role.VIEWER))
) -> MigrationTargets:
    ctx: ApiContext = request.app.state.ctx
    if ctx.placement is None:
        raise ApiError(503, "PlacementUnavailable", "this server runs no controllers to place VMs")
    if ctx.catch_up is not None:
        await ctx.catch_up()  # on a follower the cache trails the leader's writes by a poll
    return MigrationTargets.model_validate(ctx.placement.migration_targets(name))
