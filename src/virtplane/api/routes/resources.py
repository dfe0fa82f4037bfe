"""CRUD for every resource kind: GET/POST /v1/{plural}, GET/PUT/PATCH/DELETE /v1/{plural}/{name}.

The API owns metadata (labels, user annotations) and spec; status belongs to the
controllers and is never taken from a request. Annotations under the system prefix
(``virtplane.io/``) hold durable intents: a request can neither set nor drop them.
"""

from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from anyio import from_thread
from fastapi import APIRouter, Body, Depends, Query, Request, Response

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.api.limits import limiter
from virtplane.api.lists import (
    DEFAULT_LIMIT,
    DEFAULT_WATCH_TIMEOUT_S,
    LABEL_SELECTOR_HELP,
    LIST_RESPONSES,
    MAX_LIMIT,
    MAX_TOKEN,
    MAX_WATCH_TIMEOUT_S,
    WATCH_HELP,
    page_response,
)
from virtplane.api.lists import field_selector as parse_fields
from virtplane.api.lists import label_selector as parse_labels
from virtplane.api.shown import public_doc
from virtplane.api.watch import object_stream, require_resumable, stream_response
from virtplane.domain.base import copied
from virtplane.domain.intents import SYSTEM_PREFIX, split_annotations
from virtplane.domain.resources import KINDS, EventType, HostMaintenance, Resource, Setting
from virtplane.domain.selectors import MAX_SELECTOR_LENGTH, selectable_fields
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


def register_kind(router: APIRouter, cls: type[Resource], write_role: Role) -> None:
    plural, kind = cls.PLURAL, cls.KIND
    read = Depends(require(READ_ROLES.get(kind, Role.VIEWER)))
    write = Depends(require(write_role))
    tag = kind

    fields_of_kind = selectable_fields(cls)

    def list_objects(
        request: Request,
        limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Objects per page at most."),
        continue_token: str | None = Query(
            None,
            alias="continue",
            max_length=MAX_TOKEN,
            description="metadata.continue of the previous page.",
        ),
        label_selector: str = Query(
            "", alias="labelSelector", max_length=MAX_SELECTOR_LENGTH, description=LABEL_SELECTOR_HELP
        ),
        field_selector: str = Query(
            "",
            alias="fieldSelector",
            max_length=MAX_SELECTOR_LENGTH,
            description=f"e.g. {sorted(fields_of_kind)[-1]}=x; fields: {', '.join(sorted(fields_of_kind))}.",
        ),
        watch: bool = Query(False, description=WATCH_HELP),
        resource_version: int | None = Query(
            None, ge=0, le=2**63 - 1, description="With watch: stream the changes after this revision."
        ),
        timeout_s: float = Query(
            DEFAULT_WATCH_TIMEOUT_S,
            gt=0,
            le=MAX_WATCH_TIMEOUT_S,
            description="With watch: end after this long.",
        ),
        principal: Principal = read,
    ) -> Response:
        ctx = _ctx(request)
        labels = parse_labels(label_selector)
        fields = parse_fields(field_selector, fields_of_kind)
        redacted = not principal.can(Role.OPERATOR)  # a viewer: no user_data (api/shown.py)
        if not watch:
            return page_response(
                ctx.store,
                cls,
                limit=limit,
                token=continue_token,
                labels=labels,
                fields=fields,
                redacted=redacted,
            )

        def opened() -> AsyncIterator[bytes]:
            since = ctx.store.revision() if resource_version is None else resource_version
            require_resumable(ctx.store, since)
            return object_stream(
                ctx.store,
                cls,
                since=since,
                labels=labels,
                fields=fields,
                streams=ctx.streams,
                options=ctx.watch,
                timeout_s=timeout_s,
                redacted=redacted,
            )

        return stream_response(limiter(request).watched(principal.name, opened))

    def get_object(name: str, request: Request, principal: Principal = read) -> Any:
        return public_doc(_ctx(request).store.get(cls, name), redacted=not principal.can(Role.OPERATOR))

    async def create_object(
        request: Request,
        response: Response,
        body: cls = Body(...),  # type: ignore[valid-type]
        dry_run: bool = Query(False, alias="dryRun", description=DRY_RUN_HELP),
        principal: Principal = write,
    ) -> Any:
        # On the loop, as the controllers' writes (each store call is short): a sync route
        # hops to a worker thread and back to the loop twice, and under load each hop waits
        # for the reconciles its own write has just woken.
        ctx = _ctx(request)
        new: Resource = body
        if ctx.store.find(cls, new.metadata.name) is not None:
            raise AlreadyExists(kind, new.metadata.name)
        for attempt in range(CLAIM_ATTEMPTS):
            obj = await admit_on_loop(ctx, ctx.admission.on_create, _user_writable(new, None))
            if dry_run:
                response.status_code = 201
                return public_doc(obj)
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
        response.status_code = 201
        return public_doc(created)

    def _apply_update(
        ctx: ApiContext, name: str, obj: Resource, principal: Principal, *, dry_run: bool = False
    ) -> Any:
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
        if dry_run:
            if new.metadata.resource_version != current.metadata.resource_version:
                raise Conflict(kind, name, new.metadata.resource_version, current.metadata.resource_version)
            return public_doc(admit(ctx, ctx.admission.on_update, current, copied(new)))
        for attempt in range(CLAIM_ATTEMPTS):
            admitted = admit(ctx, ctx.admission.on_update, current, copied(new))
            try:
                updated = ctx.store.update(
                    admitted, check_version=True, claims=ctx.admission.claims_of(admitted)
                )
                break
            except ClaimTaken:
                if attempt == CLAIM_ATTEMPTS - 1:
                    raise
        if updated.metadata.resource_version != current.metadata.resource_version:
            ctx.store.record_event(kind, name, "Updated", f"updated by {principal.name}")
        return public_doc(updated)

    def replace_object(
        name: str,
        request: Request,
        body: cls = Body(...),  # type: ignore[valid-type]
        dry_run: bool = Query(False, alias="dryRun", description=DRY_RUN_HELP),
        principal: Principal = write,
    ) -> Any:
        return _apply_update(_ctx(request), name, body, principal, dry_run=dry_run)

    def patch_object(
        name: str,
        request: Request,
        body: dict[str, Any] = Body(..., description="RFC 7386 JSON merge patch of metadata and spec"),
        dry_run: bool = Query(False, alias="dryRun", description=DRY_RUN_HELP),
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
                return _apply_update(ctx, name, cls.model_validate(patched), principal, dry_run=dry_run)
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
        summary=f"List {kind} objects a page at a time, or watch them (watch=1)",
        response_class=Response,
        responses=LIST_RESPONSES,
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
    "Network": Role.ADMIN,
    "Volume": Role.OPERATOR,
    "VirtualMachine": Role.OPERATOR,
    "VirtualMachineSnapshot": Role.OPERATOR,
    "VirtualMachineOperation": Role.OPERATOR,
    "Secret": Role.ADMIN,
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
