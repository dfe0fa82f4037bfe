"""The event log: what happened to an object, for people (``virtplane events``).

Events that belong to a write are appended inside that write's transaction
(``Database._append_events``); these are the events on their own and the reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, func, select

from virtplane.domain.resources import Event, EventType
from virtplane.store import schema
from virtplane.store.database import Database, EventRecord, aware

_events = schema.events


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

    def prune_events(self, *, max_age_s: float, max_rows: int, batch: int = 2000) -> int:
        """Drop the events older than ``max_age_s`` and all but the newest ``max_rows``, oldest
        first, ``batch`` per transaction; how many went.

        Events are numbered in commit order and timed as they are appended, so the oldest by
        id are the oldest by time: each batch reads the oldest ids and their times (the primary
        key only: no index on time needed) and stops at the first one young enough to keep. The
        newest event always stays: on SQLite an emptied table would number events from 1 again,
        and a follower of events (by id) would see none of them."""
        cutoff = self.clock() - timedelta(seconds=max_age_s)
        dropped = 0
        step = min(64, batch)  # a pass every minute finds a few events to drop: read few, more while all go
        while True:
            with self._write() as connection:
                top = connection.execute(select(func.max(_events.c.id))).scalar_one_or_none() or 0
                rows = connection.execute(
                    select(_events.c.id, _events.c.time).order_by(_events.c.id).limit(step)
                ).all()
                upto = None
                for row in rows:
                    if row.id >= top or (row.id > top - max_rows and aware(row.time) >= cutoff):
                        break
                    upto = row.id
                if upto is None:
                    return dropped
                result = connection.execute(delete(_events).where(_events.c.id <= upto))
                dropped += int(result.rowcount or 0)
            if upto != rows[-1].id or len(rows) < step:
                return dropped
            step = min(2 * step, batch)


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
