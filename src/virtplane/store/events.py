"""The event log: what happened to an object, for people (``virtplane events``).

Events that belong to a write are appended inside that write's transaction
(``Database._append_events``); these are the events on their own and the reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from virtplane.domain.resources import Event, EventType
from virtplane.store import schema
from virtplane.store.database import Database, EventRecord, aware


class EventLog(Database):
    def record_event(
        self,
        kind: str,
        name: str,
        reason: str,
        message: str = "",
        type: EventType = EventType.NORMAL,
    ) -> None:
        self.record_events([(kind, name, reason, message, type)])

    def record_events(self, items: Sequence[EventRecord]) -> None:
        """Append many events in one transaction: (kind, name, reason, message, type)."""
        if not items:
            return
        with self._write() as connection:
            self._append_events(connection, items)

    def list_events(
        self,
        *,
        kind: str | None = None,
        name: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Event]:
        """The newest ``limit`` events matching, oldest first."""
        query = select(schema.events).where(schema.events.c.id > after_id)
        if kind:
            query = query.where(schema.events.c.kind == kind)
        if name:
            query = query.where(schema.events.c.name == name)
        query = query.order_by(schema.events.c.id.desc()).limit(limit)
        with self.connect() as connection:
            rows = connection.execute(query).all()
        return [event_from_row(row) for row in reversed(rows)]


def event_from_row(row: Any) -> Event:
    """An ``events`` row as an Event."""
    return Event(
        id=row.id,
        time=aware(row.time),
        kind=row.kind,
        name=row.name,
        type=EventType(row.type),
        reason=row.reason,
        message=row.message,
    )
