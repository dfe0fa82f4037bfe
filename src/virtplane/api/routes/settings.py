"""Settings: values typed and checked by the registry (virtplane.domain.settings)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, ConfigDict

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.domain.names import DNS_LABEL

router = APIRouter(tags=["Setting"])


class SettingValue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: Any


class SettingWrite(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: SettingValue


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


_DNS_LABEL = DNS_LABEL.anchored
ClusterQuery = Query(
    default=None, pattern=_DNS_LABEL, description="Set or reset this cluster's override (scope host)."
)
HostQuery = Query(
    default=None, pattern=_DNS_LABEL, description="Set or reset this host's override (scope host)."
)


def _where(cluster: str | None, host: str | None) -> str:
    return f" for cluster {cluster}" if cluster else f" for host {host}" if host else ""


@router.get(
    "/v1/settings", operation_id="list_settings", summary="Every setting with its value and definition"
)
def list_settings(request: Request, _: Principal = Depends(require(Role.VIEWER))) -> dict[str, Any]:
    return {"items": [s.model_dump(mode="json") for s in _ctx(request).settings.describe_all()]}


@router.get("/v1/settings/{key}", operation_id="get_settings", summary="One setting")
def get_setting(key: str, request: Request, _: Principal = Depends(require(Role.VIEWER))) -> Any:
    return _ctx(request).settings.describe(key).model_dump(mode="json")


def _set(
    request: Request,
    key: str,
    body: SettingWrite,
    principal: Principal,
    cluster: str | None = None,
    host: str | None = None,
) -> Any:
    ctx = _ctx(request)
    setting = ctx.settings.set(key, body.spec.value, cluster=cluster, host=host)
    value = (
        setting.spec.clusters[cluster]
        if cluster
        else setting.spec.hosts[host]
        if host
        else setting.spec.value
    )
    ctx.store.record_event(
        "Setting", key, "Changed", f"set to {value!r}{_where(cluster, host)} by {principal.name}"
    )
    return setting.model_dump(mode="json")


@router.put("/v1/settings/{key}", operation_id="replace_settings", summary="Set a setting's value")
def put_setting(
    key: str,
    request: Request,
    body: SettingWrite = Body(...),
    cluster: str | None = ClusterQuery,
    host: str | None = HostQuery,
    principal: Principal = Depends(require(Role.ADMIN)),
) -> Any:
    return _set(request, key, body, principal, cluster, host)


@router.patch("/v1/settings/{key}", operation_id="patch_settings", summary="Set a setting's value")
def patch_setting(
    key: str,
    request: Request,
    body: SettingWrite = Body(...),
    cluster: str | None = ClusterQuery,
    host: str | None = HostQuery,
    principal: Principal = Depends(require(Role.ADMIN)),
) -> Any:
    return _set(request, key, body, principal, cluster, host)


@router.post(
    "/v1/settings", operation_id="create_settings", summary="Set a setting (metadata.name is the key)"
)
def post_setting(
    request: Request, body: dict[str, Any] = Body(...), principal: Principal = Depends(require(Role.ADMIN))
) -> Any:
    from virtplane.api.errors import ApiError

    name = (body.get("metadata") or {}).get("name") if isinstance(body.get("metadata"), dict) else None
    spec = body.get("spec")
    if not isinstance(name, str) or not isinstance(spec, dict) or "value" not in spec:
        raise ApiError(422, "Invalid", "send {'metadata': {'name': KEY}, 'spec': {'value': VALUE}}")
    return _set(request, name, SettingWrite(spec=SettingValue(value=spec["value"])), principal)


@router.delete(
    "/v1/settings/{key}",
    operation_id="delete_settings",
    summary="Reset a setting to its default, or drop a cluster's or host's override",
)
def delete_setting(
    key: str,
    request: Request,
    cluster: str | None = ClusterQuery,
    host: str | None = HostQuery,
    principal: Principal = Depends(require(Role.ADMIN)),
) -> Any:
    ctx = _ctx(request)
    setting = ctx.settings.reset(key, cluster=cluster, host=host)
    what = f"the override{_where(cluster, host)} removed" if cluster or host else "reset to the default"
    ctx.store.record_event("Setting", key, "Reset", f"{what} by {principal.name}")
    return setting.model_dump(mode="json")
