"""The audit log: who wrote what, from where, when, and with which outcome.

One row per write through the API (create, replace, patch, delete, actions, maintenance,
faults, tokens) and per console session (opened, closed). ``fields`` names the top-level
paths a request wrote (``spec.cpu``, ``metadata.labels``), never their values: a Secret's
password is not copied here. Pruned by age and by count (settings ``audit.*``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select

from virtplane.store import schema
from virtplane.store.database import Database, aware, utcnow


@dataclass(frozen=True)
class AuditEntry:
    verb: str
    kind: str
    name: str
    status: int
    client: str
    token: str | None = None
    owner: str | None = None
    subresource: str = ""
    fields: tuple[str, ...] = ()
    reason: str = ""
    time: datetime = field(default_factory=utcnow)
    id: int = 0

    def document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.time.isoformat(),
            "token": self.token,
            "owner": self.owner,
            "client": self.client,
            "verb": self.verb,
            "kind": self.kind,
            "name": self.name,
            "subresource": self.subresource,
            "fields": list(self.fields),
            "status": self.status,
            "reason": self.reason,
        }


def _entry(row: Any) -> AuditEntry:
    return AuditEntry(
        id=row.id,
        time=aware(row.time),
        token=row.token,
        owner=row.owner,
        client=row.client,
        verb=row.verb,
        kind=row.kind,
        name=row.name,
        subresource=row.subresource,
        fields=tuple(json.loads(row.fields)),
        status=row.status,
        reason=row.reason,
    )


class AuditLog(Database):
    def record_audit(self, entry: AuditEntry) -> None:
        self.record_audits([entry])

    def record_audits(self, entries: list[AuditEntry]) -> None:
        """Append audit records, in one transaction."""
        if not entries:
            return
        rows = []
        for entry in entries:
            values = entry.document()
            del values["id"]
            values["time"] = entry.time
            values["fields"] = json.dumps(list(entry.fields))
            rows.append(values)
        with self._write() as connection:
            connection.execute(insert(schema.audit), rows)

    def audit_records(
        self,
        *,
        since: datetime | None = None,
        after_id: int = 0,
        kind: str | None = None,
        name: str | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """Up to ``limit`` records after ``after_id`` (and at or after ``since``), oldest first."""
        table = schema.audit
        query = select(table).where(table.c.id > after_id)
        if since is not None:
            query = query.where(table.c.time >= since)
        if kind:
            query = query.where(table.c.kind == kind)
        if name:
            query = query.where(table.c.name == name)
        with self.connect() as connection:
            rows = connection.execute(query.order_by(table.c.id).limit(limit)).all()
        return [_entry(row) for row in rows]

    def prune_audit(self, *, max_age: timedelta, max_records: int) -> int:
        """Delete records older than ``max_age`` and all but the newest ``max_records``; how many."""
        table = schema.audit
        with self._write() as connection:
            removed = connection.execute(delete(table).where(table.c.time < utcnow() - max_age)).rowcount
            top = connection.execute(select(func.max(table.c.id))).scalar()
            if top is not None and max_records >= 0:
                removed += connection.execute(delete(table).where(table.c.id <= top - max_records)).rowcount
        return int(removed)
