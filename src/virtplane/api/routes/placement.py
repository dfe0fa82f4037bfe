"""``GET /v1/vms/{name}/placement[?host=H]``: each host's verdict for the VM now, from the one
placement engine: chosen, ranked (score and why) or excluded (every reason, rules by name)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError

router = APIRouter(tags=["VirtualMachine"])


class HostVerdict(BaseModel):
    host: str
    ok: bool = Field(description="True: the host could take the VM now.")
    reason: str = Field(description="Why it could not (the first reason); empty when ok.")
    verdict: Literal["chosen", "ranked", "excluded", "current"] = Field(
        description="chosen: where the VM would go; ranked: could take it, less good; excluded: "
        "cannot; current: where it runs (the source of a migration)."
    )
    reasons: list[str] = Field(description="Every reason it cannot take the VM (required rules by name).")
    rank: int = Field(description="1 for the chosen host, 2 for the next...; 0 when not ranked.")
    score: float = Field(
        description="Its free memory share after placement (0 to 1) minus one per preferred rule broken."
    )
    why: str = Field(description="Why it ranks where it does; empty when not ranked.")
    broken_preferred: list[str] = Field(
        description="The preferred rules it breaks (with an admin's force, the required ones too)."
    )


class MigrationTargets(BaseModel):
    vm: str
    host: str | None = Field(description="Where the VM is now.")
    phase: str
    mode: Literal["migration", "start"] = Field(
        description="migration: a running VM, judged for a live migration; start: judged for its start."
    )
    copy_storage: bool = Field(description="Its local disks would be copied too (block migration).")
    chosen: str | None = Field(
        description="The host a Migrate without target_host (or a start) would pick now."
    )
    blocked: str = Field(description="Why the VM cannot leave its host at all; empty when it can.")
    rules: list[str] = Field(description="The placement rules that select the VM.")
    hosts: list[HostVerdict]


@router.get(
    "/v1/vms/{name}/placement",
    operation_id="get_vm_placement",
    summary="Each host's verdict for the VM now: chosen, ranked (score, why) or excluded (reasons)",
    responses={404: {"description": "No such VM, or no such host."}},
)
async def vm_placement(  # async: the service reads the controllers' cache, which lives on the loop
    name: str,
    request: Request,
    host: str | None = Query(default=None, description="Only this host's verdict."),
    _: Principal = Depends(require(Role.VIEWER)),
) -> MigrationTargets:
    ctx: ApiContext = request.app.state.ctx
    if ctx.placement is None:
        raise ApiError(503, "PlacementUnavailable", "this server runs no controllers to place VMs")
    if ctx.catch_up is not None:
        await ctx.catch_up()  # on a follower the cache trails the leader's writes by a poll
    return MigrationTargets.model_validate(ctx.placement.migration_targets(name, host))
