"""CRUD for every resource kind: GET/POST /v1/{plural}, GET/PUT/PATCH/DELETE /v1/{plural}/{name}.

The API owns metadata (labels, user annotations) and spec; status belongs to the
controllers and is never taken from a request. Annotations under the system prefix
(``virtplane.io/``) hold durable intents: a request can neither set nor drop them.
"""

from collections.abc import Callable
from typing import Any, TypeVar

from anyio import from_thread
from fastapi import APIRouter, Body, Depends, Request, Response

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.domain.intents import SYSTEM_PREFIX, split_annotations
from virtplane.domain.resources import KINDS, HostMaintenance, Resource, Secret, Setting
from virtplane.store.errors import AlreadyExists, Conflict

PATCH_ATTEMPTS = 10
"""A merge patch without a resource_version is re-applied to a fresh read this often on a conflict."""


T = TypeVar("T")


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


def admit(ctx: ApiContext, check: Callable[..., T], *args: Any) -> T:
    """Run an admission check on the event loop, against a cache caught up with the store.

    Called from the thread a sync route runs in. On the loop, the check never races the
    cache's updates (which happen there too); caught up first, it sees at least every write
    a client could have read before sending this request (read-your-writes, also on a
    follower replica).
    """

    async def on_loop() -> T:
        if ctx.catch_up is not None:
            await ctx.catch_up()
        return check(*args)

    return from_thread.run(on_loop)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _user_writable(obj: Resource, current: Resource | None) -> Resource:
    """Keep what users may write (name, labels, their annotations, spec); take the rest from current."""
    new = obj.model_copy(deep=True)
    user_annotations, _ = split_annotations(new.metadata.annotations)
    system_annotations = split_annotations(current.metadata.annotations)[1] if current else {}
    new.metadata.annotations = {**user_annotations, **system_annotations}
    if current is None:
        new.metadata.uid = ""
        new.metadata.finalizers = []
        new.status = type(new).model_fields["status"].get_default(call_default_factory=True)  # type: ignore[attr-defined]
    else:
        new.metadata.uid = current.metadata.uid
        new.metadata.finalizers = list(current.metadata.finalizers)
        new.metadata.deletion_requested_at = current.metadata.deletion_requested_at
        new.status = current.status  # type: ignore[attr-defined]
    return new


def shown(obj: Resource) -> Any:
    """What the API returns for ``obj``: a Secret's password never leaves the store."""
    doc = obj.model_dump(mode="json")
    if isinstance(obj, Secret):
        doc["spec"].pop("password", None)
        doc["status"] = {"password_set": bool(obj.spec.password)}
    return doc


def register_kind(router: APIRouter, cls: type[Resource], write_role: Role) -> None:
    plural, kind = cls.PLURAL, cls.KIND
    read = Depends(require(READ_ROLES.get(kind, Role.VIEWER)))
    write = Depends(require(write_role))
    tag = kind

    def list_objects(request: Request, _: Principal = read) -> dict[str, list[Any]]:
        return {"items": [shown(o) for o in _ctx(request).store.list_objects(cls)]}

    def get_object(name: str, request: Request, _: Principal = read) -> Any:
        return shown(_ctx(request).store.get(cls, name))

    def create_object(
        request: Request,
        response: Response,
        body: cls = Body(...),  # type: ignore[valid-type]
        principal: Principal = write,
    ) -> Any:
        ctx = _ctx(request)
        new: Resource = body
        if ctx.store.find(cls, new.metadata.name) is not None:
            raise AlreadyExists(kind, new.metadata.name)
        obj = admit(ctx, ctx.admission.on_create, _user_writable(new, None))
        created = ctx.store.create(obj)
        ctx.store.record_event(kind, created.name, "Created", f"created by {principal.name}")
        response.status_code = 201
        return shown(created)

    def _apply_update(ctx: ApiContext, name: str, obj: Resource, principal: Principal) -> Any:
        if obj.metadata.name != name:
            raise ApiError(
                422, "Invalid", f"metadata.name {obj.metadata.name!r} does not match the path {name!r}"
            )
        current = ctx.store.get(cls, name)
        new = _user_writable(obj, current)
        # resource_version 0 (omitted) means "whatever is there now": an unconditional write
        check = obj.metadata.resource_version != 0
        if not check:
            new.metadata.resource_version = current.metadata.resource_version
        new = admit(ctx, ctx.admission.on_update, current, new)
        updated = ctx.store.update(new, check_version=True)
        if updated.metadata.resource_version != current.metadata.resource_version:
            ctx.store.record_event(kind, name, "Updated", f"updated by {principal.name}")
        return shown(updated)

    def replace_object(
        name: str,
        request: Request,
        body: cls = Body(...),  # type: ignore[valid-type]
        principal: Principal = write,
    ) -> Any:
        return _apply_update(_ctx(request), name, body, principal)

    def patch_object(
        name: str,
        request: Request,
        body: dict[str, Any] = Body(..., description="RFC 7386 JSON merge patch of metadata and spec"),
        principal: Principal = write,
    ) -> Any:
        ctx = _ctx(request)
        meta = body.get("metadata")
        pinned = isinstance(meta, dict) and "resource_version" in meta
        for attempt in range(PATCH_ATTEMPTS):
            current = ctx.store.get(cls, name)
            doc = current.model_dump(mode="json")
            doc.pop("status", None)
            patched = merge_patch(doc, body)
            if isinstance(patched.get("metadata"), dict):
                patched["metadata"]["name"] = name
                if not pinned:
                    # the version the patch was applied to, not "whatever is there": a write in
                    # between would otherwise be overwritten by this stale copy (a lost update)
                    patched["metadata"]["resource_version"] = current.metadata.resource_version
            try:
                return _apply_update(ctx, name, cls.model_validate(patched), principal)
            except Conflict:
                if pinned or attempt == PATCH_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def delete_object(name: str, request: Request, principal: Principal = write) -> Any:
        ctx = _ctx(request)
        current = ctx.store.get(cls, name)
        admit(ctx, ctx.admission.on_delete, current)
        gone = ctx.store.delete(cls, name)
        ctx.store.record_event(kind, name, "Deleted" if gone else "DeletionRequested", f"by {principal.name}")
        return {
            "reason": "Deleted" if gone else "DeletionRequested",
            "message": f"{kind} {name!r} "
            + ("deleted" if gone else "will be deleted once its resources are released"),
        }

    router.add_api_route(
        f"/v1/{plural}",
        list_objects,
        methods=["GET"],
        tags=[tag],
        operation_id=f"list_{plural}",
        summary=f"List {kind} objects",
    )
    router.add_api_route(
        f"/v1/{plural}",
        create_object,
        methods=["POST"],
        tags=[tag],
        operation_id=f"create_{plural}",
        summary=f"Create a {kind}",
        status_code=201,
    )
    router.add_api_route(
        f"/v1/{plural}/{{name}}",
        get_object,
        methods=["GET"],
        tags=[tag],
        operation_id=f"get_{plural}",
        summary=f"Read a {kind}",
    )
    router.add_api_route(
        f"/v1/{plural}/{{name}}",
        replace_object,
        methods=["PUT"],
        tags=[tag],
        operation_id=f"replace_{plural}",
        summary=f"Replace a {kind}'s labels, annotations and spec",
    )
    router.add_api_route(
        f"/v1/{plural}/{{name}}",
        patch_object,
        methods=["PATCH"],
        tags=[tag],
        operation_id=f"patch_{plural}",
        summary=f"Merge-patch a {kind}",
    )
    router.add_api_route(
        f"/v1/{plural}/{{name}}",
        delete_object,
        methods=["DELETE"],
        tags=[tag],
        operation_id=f"delete_{plural}",
        summary=f"Delete a {kind}",
    )


WRITE_ROLES: dict[str, Role] = {
    "Host": Role.ADMIN,
    "StoragePool": Role.ADMIN,
    "Image": Role.ADMIN,
    "Volume": Role.OPERATOR,
    "VirtualMachine": Role.OPERATOR,
    "VirtualMachineSnapshot": Role.OPERATOR,
    "VirtualMachineOperation": Role.OPERATOR,
    "Secret": Role.ADMIN,
}
READ_ROLES: dict[str, Role] = {"Secret": Role.ADMIN}
"""Kinds that not every role may read (the rest: viewer)."""


def resources_router() -> APIRouter:
    router = APIRouter()
    for cls in KINDS:
        if cls is Setting or cls is HostMaintenance:
            continue  # own routes: settings are typed by the registry; maintenance lives under its host
        register_kind(router, cls, WRITE_ROLES[cls.KIND])
    return router


__all__ = ["SYSTEM_PREFIX", "merge_patch", "resources_router"]
