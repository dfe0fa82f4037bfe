"""Fault injection into simulated hosts (admin only): for demos and end-to-end tests.

``POST /v1/hosts/{name}/faults`` names the host; ``POST /v1/vms/{name}/faults`` finds the
VM's host itself, so a guest fault needs no knowledge of where the VM was placed.
"""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.domain.resources import Host, Name, VirtualMachine
from virtplane.domain.vocabulary import DOMAIN_FAULTS, HOST_FAULTS, FaultKind
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import SimFaultError, SimLoad

router = APIRouter(tags=["Host"])

FAULT_KINDS = tuple(kind.value for kind in FaultKind)
VM_ROUTE_KINDS = tuple(kind.value for kind in FaultKind if kind not in HOST_FAULTS)


class FaultRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(
        description="One of: " + ", ".join(FAULT_KINDS), json_schema_extra={"enum": list(FAULT_KINDS)}
    )
    vm: Name | None = Field(default=None, description="The VM the fault is for (guest faults need one)")
    count: int = Field(default=1, ge=1, le=1000)


class VMFaultRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(
        description="One of: " + ", ".join(VM_ROUTE_KINDS), json_schema_extra={"enum": list(VM_ROUTE_KINDS)}
    )
    count: int = Field(default=1, ge=1, le=1000)


FORWARDED_HEADERS = ("authorization", "cookie", "x-csrf-token", "x-request-id")


async def _forwarded(ctx: ApiContext, request: Request, body: BaseModel) -> dict[str, Any] | None:
    """The answer of the process that runs the simulator (the controllers', under ``serve
    --workers``) to this very request, with the caller's credentials; None: it runs here, or
    nowhere this process knows of."""
    if ctx.sim is not None or ctx.sim_url is None:
        return None
    headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
    async with httpx.AsyncClient(base_url=ctx.sim_url, timeout=30.0) as client:
        answer = await client.request(
            request.method, request.url.path, json=body.model_dump(), headers=headers
        )
    if answer.status_code >= 400:
        refusal = answer.json()
        raise ApiError(answer.status_code, str(refusal.get("reason")), str(refusal.get("message")))
    result: dict[str, Any] = answer.json()
    return result


NO_SIMULATOR = (
    "no simulator runs in this process: with --role api it lives in the controllers' process "
    "(serve --workers N passes these requests on to it; separate services cannot)"
)


def _inject(
    ctx: ApiContext, host: Host, kind: str, vm: VirtualMachine | None, count: int, by: Principal
) -> dict[str, Any]:
    name = host.metadata.name
    if ctx.sim is None and host.spec.uri.startswith("sim://"):
        raise ApiError(422, "NotSimulated", NO_SIMULATOR)
    if ctx.sim is None or not host.spec.uri.startswith("sim://"):
        raise ApiError(
            422, "NotSimulated", f"host {name} is not a simulated host; faults exist only for sim:// hosts"
        )
    if kind not in FAULT_KINDS:
        raise ApiError(422, "Invalid", f"kind {kind!r} is unknown; use one of: {', '.join(FAULT_KINDS)}")
    if vm is None and kind in DOMAIN_FAULTS:
        raise ApiError(422, "Invalid", f"fault {kind} needs a vm")
    if vm is not None and kind in DOMAIN_FAULTS and vm.status.host != name:
        where = f"runs on {vm.status.host}" if vm.status.host else "is on no host"
        raise ApiError(
            409,
            "WrongHost",
            f"VM {vm.metadata.name} {where}, not {name}; POST /v1/vms/{vm.metadata.name}/faults finds its host",
        )
    domain = domain_name(vm.metadata.uid) if vm is not None else None
    try:
        ctx.sim.inject(host.spec.uri.removeprefix("sim://").split("?")[0], FaultKind(kind), domain, count)
    except SimFaultError as exc:
        raise ApiError(409, "FaultNotApplicable", str(exc)) from exc
    target = f" on VM {vm.metadata.name}" if vm else ""
    ctx.store.record_event("Host", name, "FaultInjected", f"{kind}{target} x{count} by {by.name}")
    return {"host": name, "kind": kind, "vm": vm.metadata.name if vm else None, "count": count}


@router.post(
    "/v1/hosts/{name}/faults", operation_id="inject_fault", summary="Inject a fault into a simulated host"
)
async def inject_fault(
    name: str, body: FaultRequest, request: Request, principal: Principal = Depends(require(Role.ADMIN))
) -> dict[str, Any]:
    ctx: ApiContext = request.app.state.ctx
    if (forwarded := await _forwarded(ctx, request, body)) is not None:
        return forwarded
    host = ctx.store.get(Host, name)
    vm = ctx.store.get(VirtualMachine, body.vm) if body.vm is not None else None
    return _inject(ctx, host, body.kind, vm, body.count, principal)


@router.post(
    "/v1/vms/{name}/faults",
    operation_id="inject_vm_fault",
    summary="Inject a fault into a VM on the simulated host it is on",
    tags=["VirtualMachine"],
)
async def inject_vm_fault(
    name: str, body: VMFaultRequest, request: Request, principal: Principal = Depends(require(Role.ADMIN))
) -> dict[str, Any]:
    """The VM's own host (``status.host``) takes the fault: no need to know where it was placed."""
    ctx: ApiContext = request.app.state.ctx
    if (forwarded := await _forwarded(ctx, request, body)) is not None:
        return forwarded
    vm = ctx.store.get(VirtualMachine, name)
    if body.kind in HOST_FAULTS:
        raise ApiError(422, "Invalid", f"{body.kind} is a host fault: POST /v1/hosts/{{name}}/faults")
    if not vm.status.host:
        raise ApiError(409, "NotPlaced", f"VM {name} is on no host yet; there is nothing to hit")
    return _inject(ctx, ctx.store.get(Host, vm.status.host), body.kind, vm, body.count, principal)


class GuestLoad(BaseModel):
    """What a simulated guest keeps busy (its usage follows: ``virtplane top``, the graphs)."""

    model_config = ConfigDict(extra="forbid")
    cpu_pct: float = Field(default=2.0, ge=0, le=100, description="Share of its vCPUs kept busy.")
    memory_pct: float = Field(default=40.0, ge=0, le=100, description="Share of its memory in use.")
    disk_read_bps: float = Field(default=0.0, ge=0, le=1e11)
    disk_write_bps: float = Field(default=0.0, ge=0, le=1e11)
    net_rx_bps: float = Field(default=0.0, ge=0, le=1e11)
    net_tx_bps: float = Field(default=0.0, ge=0, le=1e11)


@router.put(
    "/v1/vms/{name}/load",
    operation_id="set_vm_load",
    summary="Set the load of a VM's simulated guest (CPU, memory, disk and network)",
    tags=["VirtualMachine"],
)
async def set_vm_load(
    name: str, body: GuestLoad, request: Request, principal: Principal = Depends(require(Role.ADMIN))
) -> dict[str, Any]:
    """Like a fault, for demos and tests: the guest follows the VM across hosts and restarts."""
    ctx: ApiContext = request.app.state.ctx
    if (forwarded := await _forwarded(ctx, request, body)) is not None:
        return forwarded
    vm = ctx.store.get(VirtualMachine, name)
    if ctx.sim is None:
        raise ApiError(422, "NotSimulated", f"{NO_SIMULATOR}; a real guest's load is its own")
    load = SimLoad(
        cpu=body.cpu_pct / 100,
        memory=body.memory_pct / 100,
        disk_read_bps=body.disk_read_bps,
        disk_write_bps=body.disk_write_bps,
        net_rx_bps=body.net_rx_bps,
        net_tx_bps=body.net_tx_bps,
    )
    ctx.sim.set_load(domain_name(vm.metadata.uid), load)
    ctx.store.record_event("VirtualMachine", name, "LoadSet", f"guest load set by {principal.name}")
    return {"vm": name, **body.model_dump()}
