"""A cluster's rebalancing: GET shows its balance and the plan now; POST plans (``dryRun``) or
carries the plan out now.

Any role reads: the balance and the plan say no more than the hosts' and VMs' own pages. POST
is admin's, dry run or not, as for host maintenance: it is the verb that moves VMs, and what a
dry run would return GET shows already. Carrying out is done by the process that runs the
controllers (single, or the leader): a follower answers 503 and names the leader.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.services.rebalance import RebalanceService

router = APIRouter(tags=["Cluster"])


async def _service(request: Request) -> RebalanceService:
    ctx: ApiContext = request.app.state.ctx
    if ctx.rebalance is None:
        raise ApiError(503, "RebalanceUnavailable", "this server runs no controllers to rebalance")
    if ctx.catch_up is not None:
        await ctx.catch_up()  # plan from current data: on a follower the cache trails the leader's
    return ctx.rebalance


@router.get(
    "/v1/clusters/{name}/rebalance",
    operation_id="get_cluster_rebalance",
    summary="A cluster's balance (each host's load, the spread), the plan now and the last look",
    responses={404: {"description": "No host is in that cluster."}},
)
async def show_rebalance(
    name: str, request: Request, _: Principal = Depends(require(Role.VIEWER))
) -> dict[str, Any]:
    return (await _service(request)).show(name)


@router.post(
    "/v1/clusters/{name}/rebalance",
    operation_id="rebalance_cluster",
    summary="Plan the cluster's rebalancing now (dryRun), or carry the plan out now",
    responses={404: {"description": "No host is in that cluster."}},
)
async def rebalance(
    name: str,
    request: Request,
    dry_run: bool = Query(False, alias="dryRun", description="Only compute and return the plan."),
    _: Principal = Depends(require(Role.ADMIN)),
) -> dict[str, Any]:
    service = await _service(request)
    if dry_run:
        shown = service.show(name)
        return {"cluster": name, "mode": shown["mode"], "plan": shown["plan"]}
    ctx: ApiContext = request.app.state.ctx
    role = ctx.controllers()
    if role["role"] not in ("single", "leader"):
        raise ApiError(503, "NotTheLeader", f"moves are started by the leader ({role.get('leader')}); ask it")
    return await service.apply(name)
