"""Quarantine: stored objects the current models cannot read, set aside so the rest is served.

A release must never refuse to start over one stored object (a body an older release
wrote in a shape no data migration foresaw, a hand-edited row). The upgrade
(``virtplane.store.upgrade``) names such an object in one log line (kind, name, the
field path and pydantic's message), moves it out of ``objects`` into ``quarantine``
with that reason, records an event and a ``deleted`` change (a watcher sees it go),
and the server serves the rest. Its claims (a NIC's address, a MAC) stay held: the VM
may still run on a host with them, so nothing else may be handed them. An admin lists
quarantined objects (``GET /v1/quarantine``) and deletes one once it is dealt with,
which releases its claims.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, delete, insert, select

from virtplane.domain.resources import EventType
from virtplane.store import claims, schema
from virtplane.store.database import Database, aware, utcnow
from virtplane.store.errors import NotFound

_MAX_PROBLEMS = 3
_q = schema.quarantine


@dataclass(frozen=True)
class Unreadable:
    """A stored object the current model of its kind could not validate, and why."""

    kind: str
    name: str
    uid: str
    body: str
    reason: str
    held: tuple[str, ...] = ()
    """The values it holds (``scope value``), which stay held while it is quarantined."""

    def aftermath(self) -> str:
        """What became of it, for the log and its event."""
        holds = f", still holding {', '.join(self.held)} until it is deleted" if self.held else ""
        return (
            f"moved out of the served objects{holds}; an admin lists it with GET /v1/quarantine "
            "and deletes it there"
        )

    def log_line(self) -> str:
        return f"quarantined {self.kind} {self.name}: {self.reason} ({self.aftermath()})"


@dataclass(frozen=True)
class Quarantined:
    kind: str
    name: str
    uid: str
    body: str
    reason: str
    release: str
    quarantined_at: datetime

    def document(self) -> dict[str, Any]:
        """As the API shows it: the body as JSON where it parses, else as the stored text."""
        try:
            body: Any = json.loads(self.body)
        except ValueError:
            body = self.body
        return {
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "reason": self.reason,
            "release": self.release,
            "quarantined_at": self.quarantined_at.isoformat(),
            "body": body,
        }


def validation_reason(error: ValidationError) -> str:
    """``field.path: pydantic's message`` for the first few problems of ``error``."""
    problems = []
    for problem in error.errors()[:_MAX_PROBLEMS]:
        where = ".".join(str(part) for part in problem.get("loc", ())) or "body"
        problems.append(f"{where}: {problem.get('msg', 'invalid')}")
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def set_aside(
    store: Database, connection: Connection, items: Sequence[Unreadable], release: str
) -> list[Unreadable]:
    """In ``connection``'s transaction: move ``items`` out of ``objects`` into ``quarantine``,
    with an event each and a ``deleted`` change each (events before revisions: the lock order);
    the items with the claims they keep holding."""
    if not items:
        return []
    now = utcnow()
    c = schema.claims.c
    items = [
        replace(
            item,
            held=tuple(
                f"{row.scope} {row.value}"
                for row in connection.execute(
                    select(c.scope, c.value).where(c.owner_uid == item.uid).order_by(c.scope, c.value)
                )
            ),
        )
        for item in items
    ]
    for item in items:
        connection.execute(
            insert(_q).values(
                kind=item.kind,
                name=item.name,
                uid=item.uid,
                body=item.body,
                reason=item.reason,
                release=release,
                quarantined_at=now,
            )
        )
        connection.execute(
            delete(schema.objects).where(
                schema.objects.c.kind == item.kind, schema.objects.c.name == item.name
            )
        )
    store._append_events(
        connection,
        [
            (
                i.kind,
                i.name,
                "Quarantined",
                f"release {release} cannot read it: {i.reason}; {i.aftermath()}",
                EventType.WARNING,
            )
            for i in items
        ],
    )
    for item in items:
        store._record_change(connection, item.kind, item.name, "deleted")
    return items


def _quarantined(row: Any) -> Quarantined:
    return Quarantined(
        row.kind, row.name, row.uid, row.body, row.reason, row.release, aware(row.quarantined_at)
    )


class QuarantineStore(Database):
    def quarantined(self) -> list[Quarantined]:
        """Every quarantined object, by kind and name."""
        with self.connect() as connection:
            rows = connection.execute(select(_q).order_by(_q.c.kind, _q.c.name, _q.c.quarantined_at)).all()
        return [_quarantined(row) for row in rows]

    def delete_quarantined(self, kind: str, name: str, by: str, uid: str | None = None) -> list[Quarantined]:
        """Delete the quarantined objects ``kind/name`` (only the one of ``uid`` if given: an object
        made again under the name may have been quarantined too) for good, releasing their claims;
        ``NotFound`` if there is none."""
        where = [_q.c.kind == kind, _q.c.name == name] + ([_q.c.uid == uid] if uid is not None else [])
        with self._write() as connection:
            rows = connection.execute(select(_q).where(*where).order_by(_q.c.quarantined_at)).all()
            if not rows:
                raise NotFound(f"quarantined {kind}", name)
            connection.execute(delete(_q).where(*where))
            for row in rows:
                claims.release(connection, row.uid)
            self._append_events(
                connection,
                [
                    (
                        kind,
                        name,
                        "QuarantineDeleted",
                        f"uid {row.uid} deleted from quarantine by {by}",
                        EventType.NORMAL,
                    )
                    for row in rows
                ],
            )
        return [_quarantined(row) for row in rows]


__all__ = ["QuarantineStore", "Quarantined", "Unreadable", "set_aside", "validation_reason"]
