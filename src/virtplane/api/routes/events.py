"""The event log (read-only)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Query, Request, Response

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.limits import limiter
from virtplane.api.lists import (
    DEFAULT_WATCH_TIMEOUT_S,
    LIST_RESPONSES,
    MAX_LIMIT,
    MAX_TOKEN,
    MAX_WATCH_TIMEOUT_S,
    WATCH_HELP,
    decode_continue,
    encode_continue,
    list_response,
)
from virtplane.api.watch import event_stream, stream_response
from virtplane.domain.resources import KIND_BY_NAME, KIND_BY_PLURAL
from virtplane.store.lists import events_before, last_event_id

router = APIRouter()


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


@router.get(
    "/v1/events",
    tags=["Event"],
    operation_id="list_events",
    summary="Events: the newest page first (oldest first within it), older pages with continue; or watch",
    response_class=Response,
    responses=LIST_RESPONSES,
)
def list_events(
    request: Request,
    kind: str | None = Query(
        default=None, max_length=64, description="Kind or plural, e.g. VirtualMachine or vms"
    ),
    name: str | None = Query(default=None, max_length=255),
    after_id: int = Query(
        default=0, ge=0, le=2**63 - 1, description="Only events with a larger id (for following)"
    ),
    limit: int = Query(default=100, ge=1, le=MAX_LIMIT),
    continue_token: str | None = Query(
        None,
        alias="continue",
        max_length=MAX_TOKEN,
        description="metadata.continue of the previous (newer) page.",
    ),
    watch: bool = Query(False, description=WATCH_HELP + " Events are only ever ADDED."),
    resource_version: int | None = Query(
        None, ge=0, le=2**63 - 1, description="With watch: stream the events after this event id."
    ),
    timeout_s: float = Query(
        DEFAULT_WATCH_TIMEOUT_S, gt=0, le=MAX_WATCH_TIMEOUT_S, description="With watch: end after this long."
    ),
    principal: Principal = Depends(require(Role.VIEWER)),
) -> Response:
    ctx = _ctx(request)
    if kind is not None:
        cls = KIND_BY_PLURAL.get(kind) or KIND_BY_NAME.get(kind)
        kind = cls.KIND if cls is not None else kind
    if watch:

        def opened() -> AsyncIterator[bytes]:
            since = last_event_id(ctx.store) if resource_version is None else resource_version
            return event_stream(
                ctx.store,
                since=max(since, after_id),
                kind=kind,
                name=name,
                streams=ctx.streams,
                options=ctx.watch,
                timeout_s=timeout_s,
            )

        return stream_response(limiter(request).watched(principal.name, opened))
    before: int | None = None
    if continue_token:
        before, newest = decode_continue(continue_token, "Event", int)
    else:
        newest = last_event_id(ctx.store)  # read first: a watch from it misses nothing
    events, older = events_before(ctx.store, before=before, after=after_id, limit=limit, kind=kind, name=name)
    next_token = encode_continue("Event", events[0].id, newest) if older and events else None
    return list_response([e.model_dump_json() for e in events], next_token, newest)
