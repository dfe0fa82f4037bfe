"""The audit log's recording: every write through the API and every console session.

``AuditWrites`` is a plain ASGI middleware around the routes. For a write (POST, PUT,
PATCH, DELETE under /v1/) by a caller whose token was accepted, it holds the answer's
start until the status (and, for a refusal, the reason) is known, records who, from where,
what and the outcome, then lets the answer go: a write its client has heard of is in the
audit log already, and no second round trip or request is needed. Requests refused
before a token was accepted (401) are not recorded: they would let anyone fill the table.

``AuditRecorder`` writes a record in a worker thread (the store is synchronous), exports
it as one JSON line on the ``virtplane.audit`` logger (stdout: ``virtplane.logs``) and
prunes the table by the ``audit.*`` settings every few minutes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from virtplane.api.auth import PRINCIPAL_KEY, Principal
from virtplane.domain.intents import SYSTEM_PREFIX
from virtplane.domain.resources import KIND_BY_PLURAL, Resource
from virtplane.logs import AUDIT_LOGGER
from virtplane.store.audit import AuditEntry
from virtplane.store.settings import Settings
from virtplane.store.store import Store

log = logging.getLogger(__name__)
export = logging.getLogger(AUDIT_LOGGER)

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PRUNE_EVERY_S = 300.0
MAX_READ_BYTES = 1024 * 1024  # what BodyLimit lets through
MAX_FIELDS = 64
_VERBS = {"POST": "create", "PUT": "replace", "PATCH": "patch", "DELETE": "delete"}
_OTHER_KINDS = {"tokens": "Token", "quarantine": "Quarantine"}


@dataclass(frozen=True)
class Snapshot:
    """An object's writable parts before a replace or patch, by top-level path (``spec.cpu``)."""

    cls: type[Resource]
    name: str
    paths: dict[str, Any]


class AuditRecorder:
    """Writes audit records in batches: the records of the requests that finish while one batch is
    written go into the next, in one transaction (on SQLite, a write's commit costs as much as
    the write: without batching, a busy API's every write would cost two)."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self._store = store
        self._settings = settings
        self._pruned_at = float("-inf")
        self._queued: list[tuple[AuditEntry, Snapshot | None, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._pruner: asyncio.Task[None] | None = None  # held: a task nobody references may be collected

    def record(self, entry: AuditEntry, changed_from: Snapshot | None = None) -> asyncio.Future[None]:
        """Queue ``entry`` for the next batch; the future is done once it is committed. With
        ``changed_from`` (the object before a replace or patch), its fields are the paths that
        changed, read from the object then.

        The answer does not wait for the batch (as kube-apiserver's batch audit backend): a
        write is answered before any reconcile it woke runs (tests/api/test_answer_first.py), and
        waiting would hand the loop to the controllers first. A crash in the few milliseconds
        between the answer and the batch's commit loses those records (docs/decisions.md)."""
        written = asyncio.get_running_loop().create_future()
        self._queued.append((entry, changed_from, written))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_queued())
        return written

    async def _write_queued(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            try:
                await anyio.to_thread.run_sync(self._write, [(entry, before) for entry, before, _ in batch])
            except Exception:  # the writes are done: their answers go out, the failure is logged
                log.exception("could not record %d audit entries", len(batch))
            for _, _, written in batch:
                if not written.done():
                    written.set_result(None)
            if time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:  # beside the writes: nobody waits
                self._pruned_at = time.monotonic()
                self._pruner = asyncio.create_task(self._prune_now())

    async def _prune_now(self) -> None:
        try:
            await anyio.to_thread.run_sync(self._prune)
        except Exception:
            log.exception("could not prune the audit log")

    def snapshot(self, cls: type[Resource], name: str) -> Snapshot:
        """What of ``cls/name`` a write may change (spec, labels, user annotations); empty if it is not there."""
        found = self._store.find(cls, name)
        if found is None:
            return Snapshot(cls, name, {})
        document = found.model_dump(mode="json")
        metadata = document.get("metadata") or {}
        annotations = {
            k: v for k, v in (metadata.get("annotations") or {}).items() if not k.startswith(SYSTEM_PREFIX)
        }
        return Snapshot(
            cls,
            name,
            {
                **{f"spec.{key}": value for key, value in (document.get("spec") or {}).items()},
                "metadata.labels": metadata.get("labels") or {},
                "metadata.annotations": annotations,
            },
        )

    def _write(self, batch: list[tuple[AuditEntry, Snapshot | None]]) -> None:
        entries = [self._changed(entry, before) for entry, before in batch]
        self._store.record_audits(entries)
        for entry in entries:
            export.info(json.dumps({"audit": entry.document()}, separators=(",", ":")))

    def _prune(self) -> None:
        self._store.prune_audit(
            max_age=timedelta(days=int(self._settings.get("audit.retention_days"))),
            max_records=int(self._settings.get("audit.max_records")),
        )

    def _changed(self, entry: AuditEntry, before: Snapshot | None) -> AuditEntry:
        if before is None or not before.paths or entry.status >= 300:
            return entry
        after = self.snapshot(before.cls, before.name).paths
        changed = sorted(p for p in set(before.paths) | set(after) if before.paths.get(p) != after.get(p))
        return replace(entry, fields=tuple(changed[:MAX_FIELDS]))


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def entry_for(
    principal: Principal, client: str, verb: str, kind: str, name: str, status: int, **more: Any
) -> AuditEntry:
    return AuditEntry(
        verb=verb,
        kind=kind,
        name=name,
        status=status,
        client=client,
        token=principal.name,
        owner=principal.owner,
        **more,
    )


def describe(method: str, path: str, body: bytes) -> tuple[str, str, str, str, tuple[str, ...]]:
    """(verb, kind, name, subresource, fields written) of a write; never a value of the body."""
    parts = [p for p in path.split("/") if p][1:]  # after "v1"
    document = _json(body)
    plural = parts[0] if parts else ""
    cls = KIND_BY_PLURAL.get(plural)
    kind = cls.KIND if cls is not None else _OTHER_KINDS.get(plural, plural)
    if plural == "quarantine" and len(parts) >= 3:  # /v1/quarantine/{kind}/{name}
        return "delete", parts[1], parts[2], "quarantine", ()
    if plural == "vms" and len(parts) >= 3 and parts[1] == "actions":  # bulk: /v1/vms/actions/{verb}
        return parts[2], kind, "", "actions", _fields(document)
    name = parts[1] if len(parts) > 1 else _name_in(document)
    subresource = "/".join(parts[2:])
    if subresource:
        verb = parts[-1] if method == "POST" else _VERBS.get(method, method.lower())
    elif plural == "tokens" and method == "DELETE":
        verb = "revoke"
    else:
        verb = _VERBS.get(method, method.lower())
    return verb, kind, name, subresource, _fields(document)


def _replaced(method: str, path: str) -> tuple[type[Resource], str] | None:
    """The object a replace or patch (``PUT|PATCH /v1/{plural}/{name}``) writes, if it is a resource."""
    parts = [p for p in path.split("/") if p]
    if method not in ("PUT", "PATCH") or len(parts) != 3:
        return None
    cls = KIND_BY_PLURAL.get(parts[1])
    return None if cls is None else (cls, parts[2])


def _has_credentials(scope: Scope) -> bool:
    return any(key == b"authorization" for key, _ in scope["headers"]) or bool(scope.get("subprotocols"))


def _json(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _name_in(document: Any) -> str:
    if not isinstance(document, dict):
        return ""
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else document.get("name")
    return name[:255] if isinstance(name, str) else ""


def _fields(document: Any) -> tuple[str, ...]:
    """The top-level paths a body writes: ``spec.X`` for each key of its spec, ``metadata.X``
    for labels and annotations, else its own keys (an action's options); names only."""
    found: list[str] = []
    if isinstance(document, list):  # a JSON patch: its paths
        found = [str(op.get("path", ""))[:128] for op in document if isinstance(op, dict)]
    elif isinstance(document, dict):
        spec, metadata = document.get("spec"), document.get("metadata")
        if isinstance(spec, dict):
            found += [f"spec.{key}"[:128] for key in spec]
        if isinstance(metadata, dict):
            found += [f"metadata.{key}" for key in ("labels", "annotations") if key in metadata]
        if not isinstance(spec, dict):  # an action's options, a token's: less the names said elsewhere
            named = {"metadata", "kind", "apiVersion", "name"} if isinstance(metadata, dict) else {"name"}
            found += [str(key)[:128] for key in document if key not in named]
    return tuple(sorted(set(found)))[:MAX_FIELDS]


def _reason(status: int, body: bytes) -> str:
    if status < 400:
        return ""
    document = _json(body)
    reason = document.get("reason") if isinstance(document, dict) else None
    return reason[:128] if isinstance(reason, str) else ""


class AuditWrites:
    """Records each write through the API once its status is known, before its answer goes out."""

    def __init__(self, app: ASGIApp, recorder: AuditRecorder) -> None:
        self.app = app
        self.recorder = recorder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in WRITE_METHODS
            or not scope["path"].startswith("/v1/")
        ):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        held: list[Message] = []
        recorded = False
        before: Snapshot | None = None
        target = _replaced(scope["method"], scope["path"])
        if target is not None and _has_credentials(scope):  # read before the write changes it
            before = await anyio.to_thread.run_sync(self.recorder.snapshot, *target)

        async def receive_body() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(body) < MAX_READ_BYTES:
                body.extend(message.get("body", b"")[: MAX_READ_BYTES - len(body)])
            return message

        async def record(status: int, answer: bytes) -> None:
            nonlocal recorded
            principal = scope.get(PRINCIPAL_KEY)
            if recorded or not isinstance(principal, Principal):
                return
            recorded = True
            verb, kind, name, subresource, fields = describe(scope["method"], scope["path"], bytes(body))
            entry = entry_for(
                principal,
                client_address(scope),
                verb,
                kind,
                name,
                status,
                subresource=subresource,
                fields=fields,
                reason=_reason(status, answer),
            )
            self.recorder.record(entry, before)

        async def send_recorded(message: Message) -> None:
            if message["type"] == "http.response.start":
                held.append(message)  # sent with the first part of the body, once recorded
                return
            if held:
                start = held.pop()
                await record(start["status"], message.get("body", b""))
                await send(start)
            await send(message)

        try:
            await self.app(scope, receive_body, send_recorded)
        except Exception:
            await record(500, b'{"reason":"InternalError"}')
            raise
