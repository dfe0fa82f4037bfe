"""CRUD for every resource kind: GET/POST /v1/{plural}, GET/PUT/PATCH/DELETE /v1/{plural}/{name}.

The API owns metadata (labels, user annotations) and spec; status belongs to the
controllers and is never taken from a request. Annotations under the system prefix
(``virtplane.io/``) hold durable intents: a request can neither set nor drop them.
"""

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from anyio import from_thread
from fastapi import APIRouter, Body, Depends, Query, Request, Response

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.api.limits import limiter
from virtplane.api.lists import LIST_RESPONSES, ListQuery, list_query, page_response
from virtplane.api.shown import public_doc
from virtplane.api.watch import object_stream, require_resumable, stream_response
from virtplane.domain.base import copied
from virtplane.domain.clones import merge_patch  # one RFC 7386 merge: PATCH, and a copy's spec
from virtplane.domain.intents import SYSTEM_PREFIX, split_annotations
from virtplane.domain.resources import (
    KINDS,
    EventType,
    HostMaintenance,
    OperationType,
    Resource,
    Setting,
    VirtualMachineOperation,
)
from virtplane.store.claims import ClaimTaken
from virtplane.store.errors import AlreadyExists, Conflict

PATCH_ATTEMPTS = 10
"""A merge patch without a resource_version is re-applied to a fresh read this often on a conflict."""

CLAIM_ATTEMPTS = 5
"""Admission runs again this often when a value it chose (an address, a MAC) was taken meanwhile."""

DRY_RUN_HELP = (
    "Run admission and validation and answer with what would be stored, writing nothing "
    "(a refusal is the same 4xx as a real write's)."
)


T = TypeVar("T")


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


async def admit_on_loop(ctx: ApiContext, check: Callable[..., T], *args: Any) -> T:
    """Run an admission check on the event loop, against a cache caught up with the store.

    On the loop, the check never races the cache's updates (which happen there too); caught
    up first, it sees at least every write a client could have read before sending this
    request (read-your-writes, also on a follower replica).
    """
    if ctx.catch_up is not None:
        await ctx.catch_up()
    return check(*args)


def admit(ctx: ApiContext, check: Callable[..., T], *args: Any) -> T:
    """``admit_on_loop`` from the thread a sync route runs in."""
    return from_thread.run(admit_on_loop, ctx, check, *args)


def _user_writable(obj: Resource, current: Resource | None) -> Resource:
    """Keep what users may write (name, labels, their annotations, spec); take the rest from current."""
    new = copied(obj)
    user_annotations, _ = split_annotations(new.metadata.annotations)
    system_annotations = split_annotations(current.metadata.annotations)[1] if current else {}
    new.metadata.annotations = {**user_annotations, **system_annotations}
    if current is None:
        new.metadata.uid = ""
        new.metadata.finalizers = list(new.FINALIZERS_ON_CREATE)
        new.status = type(new).model_fields["status"].get_default(call_default_factory=True)  # type: ignore[attr-defined]
    else:
        new.metadata.uid = current.metadata.uid
        new.metadata.finalizers = list(current.metadata.finalizers)
        new.metadata.deletion_requested_at = current.metadata.deletion_requested_at
        new.status = current.status  # type: ignore[attr-defined]
    return new


# --------------------------------------------------------------------------- what each route does


def _list(
    ctx: ApiContext, request: Request, cls: type[Resource], query: ListQuery, principal: Principal
) -> Response:
    redacted = not principal.can(Role.OPERATOR)  # a viewer: no user_data (api/shown.py)
    if not query.watch:
        return page_response(
            ctx.store,
            cls,
            limit=query.limit,
            token=query.continue_token,
            labels=query.labels,
            fields=query.fields,
            redacted=redacted,
        )

    def opened() -> AsyncIterator[bytes]:
        since = ctx.store.revision() if query.resource_version is None else query.resource_version
        require_resumable(ctx.store, since)
        return object_stream(
            ctx.store,
            cls,
            since=since,
            labels=query.labels,
            fields=query.fields,
            streams=ctx.streams,
            options=ctx.watch,
            timeout_s=query.timeout_s,
            redacted=redacted,
        )

    return stream_response(limiter(request).watched(principal.name, opened))


async def create_as(ctx: ApiContext, new: Resource, dry_run: bool, principal: Principal) -> Resource:
    """Admit and create ``new`` as ``principal`` (``POST /v1/{plural}``; also the VMs and volumes of
    ``POST /v1/vms/actions/create``). On the loop, as the controllers' writes (each store call is short): a sync route hops to a
    worker thread and back to the loop twice, and under load each hop waits for the reconciles
    its own write has just woken."""
    kind = new.KIND
    if (
        isinstance(new, VirtualMachineOperation)
        and new.spec.type is OperationType.MIGRATE
        and new.spec.force
        and not principal.can(Role.ADMIN)
    ):
        raise ApiError(
            403,
            "Forbidden",
            "only an admin may force a migration past a required placement rule; leave force out",
        )
    if ctx.store.find(type(new), new.metadata.name) is not None:
        raise AlreadyExists(kind, new.metadata.name)
    for attempt in range(CLAIM_ATTEMPTS):
        obj = await admit_on_loop(ctx, ctx.admission.on_create, _user_writable(new, None))
        if dry_run:
            return obj
        try:
            created = ctx.store.create(
                obj,
                claims=ctx.admission.claims_of(obj),
                events=[
                    (kind, obj.metadata.name, "Created", f"created by {principal.name}", EventType.NORMAL)
                ],
            )
            break
        except ClaimTaken:  # chosen from what was free a moment ago: choose again
            if attempt == CLAIM_ATTEMPTS - 1:
                raise
    ctx.written(created)
    return created


def _apply_update(
    ctx: ApiContext, name: str, obj: Resource, principal: Principal, *, dry_run: bool = False
) -> Any:
    kind = obj.KIND
    if obj.metadata.name != name:
        raise ApiError(
            422, "Invalid", f"metadata.name {obj.metadata.name!r} does not match the path {name!r}"
        )
    current = ctx.store.get(type(obj), name)
    new = _user_writable(obj, current)
    # resource_version 0 (omitted) means "whatever is there now": an unconditional write
    check = obj.metadata.resource_version != 0
    if not check:
        new.metadata.resource_version = current.metadata.resource_version
    if dry_run:
        if new.metadata.resource_version != current.metadata.resource_version:
            raise Conflict(kind, name, new.metadata.resource_version, current.metadata.resource_version)
        return public_doc(admit(ctx, ctx.admission.on_update, current, copied(new)))
    for attempt in range(CLAIM_ATTEMPTS):
        admitted = admit(ctx, ctx.admission.on_update, current, copied(new))
        try:
            updated = ctx.store.update(admitted, check_version=True, claims=ctx.admission.claims_of(admitted))
            break
        except ClaimTaken:
            if attempt == CLAIM_ATTEMPTS - 1:
                raise
    if updated.metadata.resource_version != current.metadata.resource_version:
        ctx.store.record_event(kind, name, "Updated", f"updated by {principal.name}")
    return public_doc(updated)


def _patch(
    ctx: ApiContext, cls: type[Resource], name: str, body: dict[str, Any], dry_run: bool, principal: Principal
) -> Any:
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
            return _apply_update(ctx, name, cls.model_validate(patched), principal, dry_run=dry_run)
        except Conflict:
            if pinned or attempt == PATCH_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _delete(ctx: ApiContext, cls: type[Resource], name: str, principal: Principal) -> dict[str, str]:
    kind = cls.KIND
    current = ctx.store.get(cls, name)
    admit(ctx, ctx.admission.on_delete, current)
    gone = ctx.store.delete(cls, name)
    ctx.store.record_event(kind, name, "Deleted" if gone else "DeletionRequested", f"by {principal.name}")
    return {
        "reason": "Deleted" if gone else "DeletionRequested",
        "message": f"{kind} {name!r} "
        + ("deleted" if gone else "will be deleted once its resources are released"),
    }


# --------------------------------------------------------------------------- one kind's endpoints
# FastAPI reads a route's parameters from its signature, and the body's model and the roles
# differ by kind: each endpoint is a small function made for its kind, which only hands over.


def _endpoints(cls: type[Resource], write_role: Role) -> dict[str, Callable[..., Any]]:
    """The kind's six endpoints, by operation (list, create, get, replace, patch, delete)."""
    read = Depends(require(READ_ROLES.get(cls.KIND, Role.VIEWER)))
    write = Depends(require(write_role))
    dry_run_query = Query(False, alias="dryRun", description=DRY_RUN_HELP)

    def list_objects(
        request: Request, query: ListQuery = Depends(list_query(cls)), principal: Principal = read
    ) -> Response:
        return _list(_ctx(request), request, cls, query, principal)

    async def create_object(
        request: Request,
        response: Response,
        body: cls = Body(...),  # type: ignore[valid-type]
        dry_run: bool = dry_run_query,
        principal: Principal = write,
    ) -> Any:
        response.status_code = 201
        return public_doc(await create_as(_ctx(request), body, dry_run, principal))

    def get_object(name: str, request: Request, principal: Principal = read) -> Any:
        return public_doc(_ctx(request).store.get(cls, name), redacted=not principal.can(Role.OPERATOR))

    def replace_object(
        name: str,
        request: Request,
        body: cls = Body(...),  # type: ignore[valid-type]
        dry_run: bool = dry_run_query,
        principal: Principal = write,
    ) -> Any:
        return _apply_update(_ctx(request), name, body, principal, dry_run=dry_run)

    def patch_object(
        name: str,
        request: Request,
        body: dict[str, Any] = Body(..., description="RFC 7386 JSON merge patch of metadata and spec"),
        dry_run: bool = dry_run_query,
        principal: Principal = write,
    ) -> Any:
        return _patch(_ctx(request), cls, name, body, dry_run, principal)

    def delete_object(name: str, request: Request, principal: Principal = write) -> Any:
        return _delete(_ctx(request), cls, name, principal)

    return {
        "list": list_objects,
        "create": create_object,
        "get": get_object,
        "replace": replace_object,
        "patch": patch_object,
        "delete": delete_object,
    }


@dataclass(frozen=True)
class _Route:
    operation: str
    method: str
    on_one: bool
    """``/v1/{plural}/{name}``; else ``/v1/{plural}``."""
    summary: str
    """With ``{kind}``."""
    extra: Mapping[str, Any] = field(default_factory=dict)


ROUTES = (
    _Route(
        "list",
        "GET",
        False,
        "List {kind} objects a page at a time, or watch them (watch=1)",
        {"response_class": Response, "responses": LIST_RESPONSES},
    ),
    _Route("create", "POST", False, "Create a {kind}", {"status_code": 201}),
    _Route("get", "GET", True, "Read a {kind}"),
    _Route("replace", "PUT", True, "Replace a {kind}'s labels, annotations and spec"),
    _Route("patch", "PATCH", True, "Merge-patch a {kind}"),
    _Route("delete", "DELETE", True, "Delete a {kind}"),
)


def register_kind(router: APIRouter, cls: type[Resource], write_role: Role) -> None:
    endpoints = _endpoints(cls, write_role)
    for route in ROUTES:
        router.add_api_route(
            f"/v1/{cls.PLURAL}" + ("/{name}" if route.on_one else ""),
            endpoints[route.operation],
            methods=[route.method],
            tags=[cls.KIND],
            operation_id=f"{route.operation}_{cls.PLURAL}",
            summary=route.summary.format(kind=cls.KIND),
            **route.extra,
        )


WRITE_ROLES: dict[str, Role] = {
    "Host": Role.ADMIN,
    "StoragePool": Role.ADMIN,
    "Image": Role.ADMIN,
    "Network": Role.ADMIN,
    "Volume": Role.OPERATOR,
    "VirtualMachine": Role.OPERATOR,
    "VirtualMachineSnapshot": Role.OPERATOR,
    "VirtualMachineOperation": Role.OPERATOR,
    "Secret": Role.ADMIN,
    "BackupTarget": Role.ADMIN,
    "VirtualMachineBackup": Role.OPERATOR,
    "BackupPolicy": Role.ADMIN,
    "PlacementRule": Role.ADMIN,
}
READ_ROLES: dict[str, Role] = {"Secret": Role.ADMIN}
"""Kinds that not every role may read (the rest: viewer)."""


def add_resource_routes(router: APIRouter) -> None:
    """Every kind's routes, on ``router``: the app's own (``app.router``), so that a request is
    matched once. FastAPI matches an included router's routes once to choose the router and
    again to choose the route: 57 route patterns tried per POST of a volume instead of 31."""
    for cls in KINDS:
        if cls is Setting or cls is HostMaintenance:
            continue  # own routes: settings are typed by the registry; maintenance lives under its host
        register_kind(router, cls, WRITE_ROLES[cls.KIND])


__all__ = ["SYSTEM_PREFIX", "add_resource_routes", "merge_patch"]
