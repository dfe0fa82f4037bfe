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

import functools
import logging
from pathlib import Path

from sqlalchemy import select, text, update
from sqlalchemy.exc import DBAPIError

from virtplane.domain.resources import Secret
from virtplane.store import schema
from virtplane.store.bodies import normalize_bodies
from virtplane.store.changes import Change, ChangeLog
from virtplane.store.creates import ObjectCreates
from virtplane.store.database import LOCK_MIGRATE, EventRecord, sqlite_url, utcnow
from virtplane.store.events import EventLog, event_from_row
from virtplane.store.leases import Leases
from virtplane.store.migrations.data import LATEST, data_version, upgrade_bodies
from virtplane.store.sealing import PREFIX, Keyring, open_secret
from virtplane.store.tokens import Tokens
from virtplane.store.writes import ObjectWrites

__all__ = ["Change", "EventRecord", "Store", "event_from_row", "head_revision", "sqlite_url", "utcnow"]

MIGRATIONS = Path(__file__).parent / "migrations"
log = logging.getLogger("virtplane.store")


@functools.cache
def head_revision() -> str:
    """The newest migration's revision: each file of ``migrations/versions`` is named after its
    revision, ``NNNN_what.py`` (``tests/store/test_store.py`` holds Alembic to that)."""
    return max(path.name[:4] for path in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))


class Store(ObjectWrites, ObjectCreates, ChangeLog, EventLog, Tokens, Leases):
    """All durable state. Construct with a SQLAlchemy URL, then call ``migrate()``."""

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (creates it on an empty database).

        A schema at that revision already (every start but the first of a release) is known
        from one query, and Alembic is not loaded: it is a tenth of a second of a start-up,
        which a fleet coming back from an outage waits for."""
        if self.schema_revision() != head_revision() or self._data_version() != LATEST:
            self._upgrade()
        normalize_bodies(self)

    def _upgrade(self) -> None:
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as connection:
            # Replicas that start together must not both create the tables.
            self._advisory_lock(connection, LOCK_MIGRATE)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            for line in upgrade_bodies(connection, self.keyring):
                log.info("upgrade: %s", line)

    def _data_version(self) -> int | None:
        with self.engine.connect() as connection:
            return data_version(connection)

    def reseal_secrets(self, keyring: Keyring) -> int:
        """Every Secret's password sealed again with ``keyring``'s newest key (a plaintext one
        sealed), in one transaction; how many. No revision: the Secrets say the same."""
        resealed = 0
        with self._write() as connection:
            if self.is_sqlite:  # the old sealed bytes zeroed, not left in free space
                connection.exec_driver_sql("PRAGMA secure_delete = ON")
            rows = connection.execute(
                select(schema.objects.c.name, schema.objects.c.body).where(
                    schema.objects.c.kind == Secret.KIND
                )
            ).all()
            for name, text_body in rows:
                secret = Secret.model_validate_json(text_body)
                password = secret.spec.password
                if password is None:
                    continue
                secret.spec.password = (
                    keyring.reseal(password) if password.startswith(PREFIX) else keyring.seal(password)
                )
                connection.execute(
                    update(schema.objects)
                    .where(schema.objects.c.kind == Secret.KIND, schema.objects.c.name == name)
                    .values(body=secret.model_dump_json())
                )
                resealed += 1
        return resealed

    def opened(self, secret: Secret) -> Secret:
        """``secret`` with its password in clear (``sealing``): for the BMC client only."""
        return open_secret(self.keyring, secret)

    def schema_revision(self) -> str | None:
        """The schema's Alembic revision (None: no schema yet)."""
        try:
            with self.engine.connect() as connection:
                revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except DBAPIError:  # no such table: an empty database (any other failure shows in the upgrade)
            return None
        return None if revision is None else str(revision)
