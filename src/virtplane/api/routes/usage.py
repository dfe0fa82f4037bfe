"""``GET /v1/vms/{name}/usage`` and ``GET /v1/hosts/{name}/usage``: the collected figures since
``since``, columnar (``t`` and one array per metric, ``null`` where there is no figure) so a
chart takes them as they are.

``since`` is relative (``90s``, ``15m``, ``1h``, ``24h``; default ``1h``) or an RFC 3339 time;
the history holds a day. The last hour comes at the collection interval, what is older in
5-minute means. The leader collects (``runtime/usage``): another replica answers 503 and
names it.
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.domain.names import RELATIVE_SINCE
from virtplane.domain.resources import Host, VirtualMachine
from virtplane.runtime.usage import UsageHistory
from virtplane.runtime.usage_rates import HOST_METRICS, VM_METRICS
from virtplane.runtime.usage_rings import Columns

router = APIRouter()

DAY_S = 86400
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SINCE_HELP = "How far back: 15m, 1h, 24h (s, m, h, d), or an RFC 3339 time; at most a day ago."


def since_time(since: str, now: float) -> float:
    """The wall time ``since`` names; ApiError 422 with the reason when it names none we hold."""
    relative = RELATIVE_SINCE.regex.fullmatch(since.strip())
    if relative:
        seconds = int(relative.group(1)) * _UNIT_S[relative.group(2)]
        if not 0 < seconds <= DAY_S:
            raise ApiError(422, "Invalid", f"since={since}: from 1s to 24h back (the history holds a day)")
        return now - seconds
    try:
        at = datetime.fromisoformat(since.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(
            422, "Invalid", f"since={since!r} is neither a duration (15m, 1h, 24h) nor an RFC 3339 time"
        ) from None
    if at.tzinfo is None:
        raise ApiError(422, "Invalid", f"since={since}: an RFC 3339 time needs its offset (Z or +01:00)")
    stamp = at.timestamp()
    if stamp > now:
        raise ApiError(422, "Invalid", f"since={since} is in the future")
    return max(stamp, now - DAY_S)


def _history(ctx: ApiContext) -> UsageHistory:
    history = ctx.usage
    if history is None or not history.collecting:
        leader = ctx.controllers().get("leader")
        where = f"the leader ({leader})" if leader else "the replica that runs the controllers"
        raise ApiError(503, "NotCollectedHere", f"usage is collected by {where}, not by this replica")
    return history


def _answer(kind: str, name: str, history: UsageHistory, columns: Columns, since: float) -> dict[str, Any]:
    return {
        "kind": kind,
        "name": name,
        "interval_s": history.interval_s,
        "since": round(since, 3),
        "t": columns.t,
        **columns.columns,
    }


def _figures(values: tuple[float, ...], names: tuple[str, ...]) -> dict[str, float | None]:
    return {n: None if math.isnan(v) else round(v, 3) for n, v in zip(names, values, strict=True)}


@router.get(
    "/v1/vms/{name}/usage",
    operation_id="get_vm_usage",
    summary="A VM's CPU, memory, disk and network use since a time (columnar, for charts)",
    tags=["VirtualMachine"],
    responses={404: {"description": "No such VM."}, 422: {"description": "A bad since."}},
)
async def vm_usage(
    name: str,
    request: Request,
    since: str = Query("1h", description=SINCE_HELP),
    _: Principal = Depends(require(Role.VIEWER)),
) -> dict[str, Any]:
    ctx: ApiContext = request.app.state.ctx
    vm = ctx.store.get(VirtualMachine, name)
    start = since_time(since, time.time())
    history = _history(ctx)
    answer = _answer("VirtualMachine", name, history, history.vm_columns(vm.metadata.uid, start), start)
    now = history.vms.get(vm.metadata.uid)
    answer["host"] = vm.status.host
    answer["current"] = None
    if now is not None and history.fresh(now.tick):
        answer["current"] = {
            **_figures(now.rates.values, VM_METRICS),
            "disks": [
                {"name": d.name, **_figures((d.read_bps, d.write_bps, d.read_iops, d.write_iops), _DISK)}
                for d in now.rates.disks
            ],
        }
    return answer


_DISK = ("read_bps", "write_bps", "read_iops", "write_iops")


@router.get(
    "/v1/hosts/{name}/usage",
    operation_id="get_host_usage",
    summary="A host's CPU, memory, load and its VMs' I/O since a time (columnar, for charts)",
    tags=["Host"],
    responses={404: {"description": "No such host."}, 422: {"description": "A bad since."}},
)
async def host_usage(
    name: str,
    request: Request,
    since: str = Query("1h", description=SINCE_HELP),
    _: Principal = Depends(require(Role.VIEWER)),
) -> dict[str, Any]:
    ctx: ApiContext = request.app.state.ctx
    ctx.store.get(Host, name)
    start = since_time(since, time.time())
    history = _history(ctx)
    answer = _answer("Host", name, history, history.host_columns(name, start), start)
    now = history.hosts.get(name)
    fresh = now is not None and history.fresh(now.tick)
    answer["current"] = _figures(now.values, HOST_METRICS) if now is not None and fresh else None
    return answer


SORTS = {
    "cpu": ("cpu_pct",),
    "memory": ("memory_used_mib",),
    "disk": ("disk_read_bps", "disk_write_bps"),
    "net": ("net_rx_bps", "net_tx_bps"),
}


def _sort_key(figures: dict[str, Any], sort: str) -> float:
    return float(sum(figures.get(metric) or 0.0 for metric in SORTS[sort]))


def _ranked(rows: list[dict[str, Any]], sort: str, limit: int, interval_s: float) -> dict[str, Any]:
    """``top``'s answer: the busiest ``limit`` rows by ``sort``, ties by name."""
    rows.sort(key=lambda row: (-_sort_key(row, sort), row["name"]))
    return {"interval_s": interval_s, "sort": sort, "total": len(rows), "items": rows[:limit]}


def _checked_sort(sort: str) -> str:
    if sort not in SORTS:
        raise ApiError(422, "Invalid", f"sort={sort!r}: one of {', '.join(SORTS)}")
    return sort


@router.get(
    "/v1/usage/vms",
    operation_id="list_vm_usage",
    summary="The running VMs' use now, busiest first (virtplane top vms)",
    tags=["VirtualMachine"],
)
async def top_vms(
    request: Request,
    sort: str = Query("cpu", description="cpu, memory, disk or net"),
    limit: int = Query(20, ge=1, le=10000),
    _: Principal = Depends(require(Role.VIEWER)),
) -> dict[str, Any]:
    ctx: ApiContext = request.app.state.ctx
    _checked_sort(sort)
    history = _history(ctx)
    rows = [
        {"name": vm.vm, "host": vm.host, **_figures(vm.rates.values, VM_METRICS)}
        for vm in history.current_vms()
    ]
    return _ranked(rows, sort, limit, history.interval_s)


@router.get(
    "/v1/usage/hosts",
    operation_id="list_host_usage",
    summary="The hosts' use now, busiest first (virtplane top hosts)",
    tags=["Host"],
)
async def top_hosts(
    request: Request,
    sort: str = Query("cpu", description="cpu, memory, disk or net"),
    limit: int = Query(20, ge=1, le=10000),
    _: Principal = Depends(require(Role.VIEWER)),
) -> dict[str, Any]:
    ctx: ApiContext = request.app.state.ctx
    _checked_sort(sort)
    history = _history(ctx)
    rows = [{"name": host.host, **_figures(host.values, HOST_METRICS)} for host in history.current_hosts()]
    return _ranked(rows, sort, limit, history.interval_s)
