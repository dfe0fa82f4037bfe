"""The change log: one row per write, whose id is the store-wide revision.

Watchers read "the rows after the revision I saw" (``changes_since``); old rows are
compacted away (``prune_changes``: by age and by count), and a watch from before the
compaction horizon is refused instead of missing changes.

A change row has no time of its own (adding one would rewrite the busiest table's rows
and its schema); ages come from marks instead: each pruning run records in ``feed_state``
the newest revision at that time (``mark:<unix time>``), so every change up to a mark's
revision is at least as old as the mark. A change is dropped by age once a mark after it
is older than the retention: up to one marking interval later than its exact age.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from virtplane.store import schema
from virtplane.store.database import Database

MARK = "mark:"
MARKS_PER_RETENTION = 100
"""Marks are at least a hundredth of the retention apart: ages are that exact, and the marks
``feed_state`` holds stay about a hundred, whatever the retention."""


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
        """Drop all change rows but the newest ``keep_last``; watchers that fell further behind
        resync from a full list.

        The highest revision dropped is remembered (``compacted_revision``): a watch from
        before it would miss changes, so it is refused instead.
        """
        return self._drop_changes(self.revision() - keep_last)

    def prune_changes(
        self, *, max_age_s: float, max_rows: int, keep_after: int | None = None, batch: int = 2000
    ) -> int:
        """Drop the changes older than ``max_age_s`` (by the marks, see the module) and all but
        the newest ``max_rows``, never one after ``keep_after`` (a revision a local reader has
        not read yet); a batch per transaction. Records a mark; returns how many rows went."""
        now = self.clock().timestamp()
        marks = self._marks()
        cutoff = now - max_age_s
        by_age = max((revision for at, revision in marks if at <= cutoff), default=0)
        horizon = max(self.revision() - max_rows, by_age)
        if keep_after is not None:
            horizon = min(horizon, keep_after)
        if not marks or marks[-1][0] < now - max_age_s / MARKS_PER_RETENTION:
            self._mark(now)
        dropped = self._drop_changes(horizon, batch)
        spent = [f"{MARK}{at!r}" for at, revision in marks if at <= cutoff and revision <= horizon]
        if spent:
            with self._write() as connection:
                connection.execute(delete(schema.feed_state).where(schema.feed_state.c.name.in_(spent)))
        return dropped

    def _marks(self) -> list[tuple[float, int]]:
        state = schema.feed_state
        with self.connect() as connection:
            rows = connection.execute(
                select(state.c.name, state.c.revision).where(state.c.name.startswith(MARK))
            ).all()
        return sorted((float(name.removeprefix(MARK)), int(revision)) for name, revision in rows)

    def _mark(self, now: float) -> None:
        try:
            with self._write() as connection:
                top = connection.execute(select(func.max(schema.changes.c.revision))).scalar_one() or 0
                connection.execute(insert(schema.feed_state).values(name=f"{MARK}{now!r}", revision=top))
        except IntegrityError:  # marked at this very time already
            pass

    def _drop_changes(self, horizon: int, batch: int = 2000) -> int:
        """Drop the changes up to ``horizon``, ``batch`` revisions per transaction, each moving
        ``compacted_revision`` with it (a reader between two batches sees where they are).

        The newest change always stays: the store's revision is the newest row's, and on
        SQLite an emptied table would hand out revision 1 again."""
        dropped = 0
        changes, state = schema.changes, schema.feed_state
        while True:
            with self._write() as connection:
                oldest, newest = connection.execute(
                    select(func.min(changes.c.revision), func.max(changes.c.revision))
                ).one()
                upto = min(horizon, (oldest or 0) + batch - 1, (newest or 0) - 1)
                if oldest is None or oldest > upto:
                    return dropped
                result = connection.execute(delete(changes).where(changes.c.revision <= upto))
                connection.execute(
                    update(state)
                    .where(state.c.name == "compacted", state.c.revision < upto)
                    .values(revision=upto)
                )
                dropped += int(result.rowcount or 0)

    def compacted_revision(self) -> int:
        """The highest revision compaction removed: changes after it are all still there."""
        with self.connect() as connection:
            value = connection.execute(
                select(schema.feed_state.c.revision).where(schema.feed_state.c.name == "compacted")
            ).scalar_one_or_none()
        return int(value or 0)
