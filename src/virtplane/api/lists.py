"""What every list shares: ``limit``, the opaque ``continue`` token, selectors, the list's metadata.

A list answers ``{"items": [...], "metadata": {"continue": TOKEN | null, "resource_version": N}}``.
``resource_version`` is the store's revision when the first page was read (every page is
read after it), so a watch from it misses nothing; a later page may already show writes
made after it, which the watch then delivers again. The continue token is base64url of
``{"k": kind, "a": last name, "r": that revision}``: a client passes it back unchanged.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import Query, Response

from virtplane.api.errors import ApiError
from virtplane.api.shown import public_bodies
from virtplane.api.watch import require_resumable
from virtplane.domain.resources import Resource
from virtplane.domain.selectors import (
    MAX_SELECTOR_LENGTH,
    Selector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
    selectable_fields,
)
from virtplane.store.lists import list_page
from virtplane.store.store import Store

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "ListQuery",
    "decode_continue",
    "encode_continue",
    "field_selector",
    "label_selector",
    "list_query",
    "list_response",
    "page_response",
]

DEFAULT_LIMIT = 500
"""Objects per page when a request names no limit: no request reads a whole collection."""
MAX_LIMIT = 5000
MAX_TOKEN = 2048
DEFAULT_WATCH_TIMEOUT_S = 1800.0
MAX_WATCH_TIMEOUT_S = 3600.0

LABEL_SELECTOR_HELP = "e.g. app=web,tier!=db,env in (prod,qa),env notin (dev),canary,!legacy: all must hold."
WATCH_HELP = (
    "Stream changes as JSON lines (application/x-ndjson) instead of a page: ADDED, MODIFIED, DELETED, "
    "BOOKMARK (first, when quiet, last) and ERROR (410 Expired) events."
)
LIST_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A page: {items, metadata: {continue, resource_version}}; with watch, a stream "
        "of JSON lines {type, object}.",
        "content": {"application/json": {}, "application/x-ndjson": {}},
    },
    410: {"description": "The continue token or resource_version is older than the change feed keeps."},
    422: {"description": "A malformed selector or continue token; the answer names the position."},
}

_TOKEN_ALPHABET = re.compile(r"[^A-Za-z0-9_-]")


def encode_continue(kind: str, position: str | int, revision: int) -> str:
    raw = json.dumps({"k": kind, "a": position, "r": revision}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str, kind: str, position_type: type[str] | type[int]) -> tuple[Any, int]:
    """(position after which the next page starts, revision of the first page); 422 if malformed.

    The position is a name (str) for resources, an event id (int) for events.
    """

    def invalid(problem: str, position: int | None = None) -> ApiError:
        where = "" if position is None else f" at position {position}"
        return ApiError(
            422,
            "InvalidContinue",
            f"continue token{where}: {problem}; pass back the token of the previous page unchanged",
            position=position,
        )

    bad = _TOKEN_ALPHABET.search(token)
    if bad is not None:
        raise invalid(f"{bad.group()!r} is not part of a token", bad.start())
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):
        raise invalid("not a token this server made") from None
    if not isinstance(decoded, dict) or set(decoded) != {"k", "a", "r"}:
        raise invalid("not a token this server made")
    revision, position = decoded["r"], decoded["a"]
    if not _is(revision, int) or revision < 0 or not _is(position, position_type):
        raise invalid("not a token this server made")
    if decoded["k"] != kind:
        raise invalid(f"the token continues a list of {decoded['k']}, not {kind}")
    return position, revision


def _is(value: Any, kind: type[str] | type[int]) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def _parsed(parameter: str, text: str, parse: Any) -> Selector:
    try:
        selector: Selector = parse(text)
    except SelectorError as error:
        raise ApiError(
            422,
            "InvalidSelector",
            f"{parameter} {text!r}: {error}",
            parameter=parameter,
            position=error.position,
        ) from None
    return selector


def label_selector(text: str) -> Selector:
    return _parsed("labelSelector", text, parse_label_selector)


def field_selector(text: str, fields: Iterable[str]) -> Selector:
    allowed = frozenset(fields)
    return _parsed("fieldSelector", text, lambda t: parse_field_selector(t, allowed))


def list_response(items_json: list[str], continue_token: str | None, revision: int) -> Response:
    """The list answer, assembled from already-serialized items (no re-encoding of each one)."""
    metadata = json.dumps({"continue": continue_token, "resource_version": revision})
    body = '{"items":[' + ",".join(items_json) + '],"metadata":' + metadata + "}"
    return Response(content=body, media_type="application/json")


def page_response(
    store: Store,
    cls: type[Resource],
    *,
    limit: int,
    token: str | None,
    labels: Selector,
    fields: Selector,
    redacted: bool = False,
) -> Response:
    """One page of ``cls``: from the start, or after the position ``token`` names; ``redacted``:
    as a viewer sees it (api/shown.py)."""
    if token:
        after, revision = decode_continue(token, cls.KIND, str)
        require_resumable(store, revision)
    else:
        after, revision = "", store.revision()  # read first: every page is at least this new
    page = list_page(store, cls.KIND, limit=limit, after=after, labels=labels, fields=fields)
    # Stored bodies are in the current schema (store.bodies), so they are the answer as they are,
    # but for what the API never shows (a Secret's password).
    items = public_bodies(cls, page.bodies, redacted=redacted)
    next_token = None if page.last_name is None else encode_continue(cls.KIND, page.last_name, revision)
    return list_response(items, next_token, revision)


@dataclass(frozen=True)
class ListQuery:
    limit: int
    continue_token: str | None
    labels: Selector
    fields: Selector
    watch: bool
    resource_version: int | None
    timeout_s: float


def list_query(cls: type[Resource]) -> Callable[..., ListQuery]:
    """The list route's query parameters for ``cls`` (its selectable fields in the help)."""
    fields_of_kind = selectable_fields(cls)

    def query(
        limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Objects per page at most."),
        continue_token: str | None = Query(
            None,
            alias="continue",
            max_length=MAX_TOKEN,
            description="metadata.continue of the previous page.",
        ),
        labels_text: str = Query(
            "", alias="labelSelector", max_length=MAX_SELECTOR_LENGTH, description=LABEL_SELECTOR_HELP
        ),
        fields_text: str = Query(
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
    ) -> ListQuery:
        return ListQuery(
            limit,
            continue_token,
            label_selector(labels_text),
            field_selector(fields_text, fields_of_kind),
            watch,
            resource_version,
            timeout_s,
        )

    return query
