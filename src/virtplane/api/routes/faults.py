"""Fault injection into simulated hosts (admin only): for demos and end-to-end tests."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.domain.resources import Host, Name, VirtualMachine
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import FaultKind, SimFaultError

router = APIRouter(tags=["Host"])

# the simulator's own list: one place for the fault kinds
FAULT_KINDS = tuple(kind.value for kind in FaultKind)
VM_FAULTS = frozenset({"guest-shutdown", "guest-reset", "crash"})


class FaultRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(
        description="One of: " + ", ".join(FAULT_KINDS), json_schema_extra={"enum": list(FAULT_KINDS)}
    )
    vm: Name | None = Field(default=None, description="The VM the fault is for (guest faults need one)")
    count: int = Field(default=1, ge=1, le=1000)


@router.post(
    "/v1/hosts/{name}/faults", operation_id="inject_fault", summary="Inject a fault into a simulated host"
)
async def inject_fault(
    name: str, body: FaultRequest, request: Request, principal: Principal = Depends(require(Role.ADMIN))
) -> dict[str, Any]:
    ctx: ApiContext = request.app.state.ctx
    host = ctx.store.get(Host, name)
    if ctx.sim is None or not host.spec.uri.startswith("sim://"):
        raise ApiError(
            422, "NotSimulated", f"host {name} is not a simulated host; faults exist only for sim:// hosts"
        )
    if body.kind not in FAULT_KINDS:
        raise ApiError(422, "Invalid", f"kind {body.kind!r} is unknown; use one of: {', '.join(FAULT_KINDS)}")
    domain = None
    if body.vm is not None:
        vm = ctx.store.get(VirtualMachine, body.vm)
        domain = domain_name(vm.metadata.uid)
    elif body.kind in VM_FAULTS:
        raise ApiError(422, "Invalid", f"fault {body.kind} needs a vm")
    try:
        ctx.sim.inject(
            host.spec.uri.removeprefix("sim://").split("?")[0], FaultKind(body.kind), domain, body.count
        )
    except SimFaultError as exc:
        raise ApiError(409, "FaultNotApplicable", str(exc)) from exc
    target = f" on VM {body.vm}" if body.vm else ""
    ctx.store.record_event(
        "Host", name, "FaultInjected", f"{body.kind}{target} x{body.count} by {principal.name}"
    )
    return {"host": name, "kind": body.kind, "vm": body.vm, "count": body.count}
