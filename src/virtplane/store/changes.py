"""The change log: one row per write, whose id is the store-wide revision.

Watchers read "the rows after the revision I saw" (``changes_since``); old rows are
compacted away, and a watch from before the compaction horizon is refused instead of
missing changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select, update

from virtplane.store import schema
from virtplane.store.database import Database


@dataclass(frozen=True)
class Change:
    revision: int
    kind: str
    name: str
    op: str  # "added" | "modified" | "deleted"


class ChangeLog(Database):
    def revision(self) -> int:
        with self.connect() as connection:
            row = self.prepared.revision.first(connection, {})
        return int(row[0] or 0) if row is not None else 0

    def changes_since(self, revision: int, limit: int = 5000) -> list[Change]:
        with self.connect() as connection:
            rows = self.prepared.changes_since.all(connection, {"b_revision": revision, "b_limit": limit})
        return [Change(int(number), kind, name, op) for number, kind, name, op in rows]

    def compact_changes(self, keep_last: int = 100_000) -> int:
        """Drop old change rows; watchers that fell further behind resync from a full list.

        The highest revision dropped is remembered (``compacted_revision``): a watch from
        before it would miss changes, so it is refused instead.
        """
        with self._write() as connection:
            top = connection.execute(select(func.max(schema.changes.c.revision))).scalar_one() or 0
            horizon = top - keep_last
            result = connection.execute(delete(schema.changes).where(schema.changes.c.revision <= horizon))
            state = schema.feed_state
            connection.execute(
                update(state)
                .where(state.c.name == "compacted", state.c.revision < horizon)
                .values(revision=horizon)
            )
            return int(result.rowcount or 0)

    def compacted_revision(self) -> int:
        """The highest revision compaction removed: changes after it are all still there."""
        with self.connect() as connection:
            value = connection.execute(
                select(schema.feed_state.c.revision).where(schema.feed_state.c.name == "compacted")
            ).scalar_one_or_none()
        return int(value or 0)
