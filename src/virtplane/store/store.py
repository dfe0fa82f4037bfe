"""The durable store: resources with optimistic concurrency, a change feed, events, tokens.

``Store`` is one object over SQLAlchemy Core, made of parts that each own one table's
work; the rules every write keeps (one short transaction, revisions committed in the
order they are drawn, the lock order events then revisions) are in
``virtplane.store.database``:

- ``reads``: objects by name, by names, by kind (paged lists are in ``lists``);
- ``creates`` and ``writes``: new objects; updates, status-only updates, deletes;
- ``changes``: the change log behind watches; ``events``: the event log;
- ``tokens``: API tokens; ``leases``: leader election.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from virtplane.store.bodies import normalize_bodies
from virtplane.store.changes import Change, ChangeLog
from virtplane.store.creates import ObjectCreates
from virtplane.store.database import LOCK_MIGRATE, EventRecord, sqlite_url, utcnow
from virtplane.store.events import EventLog, event_from_row
from virtplane.store.leases import Leases
from virtplane.store.tokens import Tokens
from virtplane.store.writes import ObjectWrites

__all__ = ["Change", "EventRecord", "Store", "event_from_row", "sqlite_url", "utcnow"]


class Store(ObjectWrites, ObjectCreates, ChangeLog, EventLog, Tokens, Leases):
    """All durable state. Construct with a SQLAlchemy URL, then call ``migrate()``."""

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (creates it on an empty database)."""
        config = Config()
        config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        with self.engine.begin() as connection:
            # Replicas that start together must not both create the tables.
            self._advisory_lock(connection, LOCK_MIGRATE)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        normalize_bodies(self)

    def schema_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
