"""The durable store: resources with optimistic concurrency, a change feed, events, tokens.

``Store`` is one object over SQLAlchemy Core, made of parts that each own one table's
work; the rules every write keeps (one short transaction, revisions committed in the
order they are drawn, the lock order events then revisions) are in
``virtplane.store.database``:

- ``reads``: objects by name, by names, by kind (paged lists are in ``lists``);
- ``creates`` and ``writes``: new objects; updates, status-only updates, deletes;
- ``changes``: the change log behind watches; ``events``: the event log;
- ``tokens``: API tokens; ``audit``: who wrote what; ``leases``: leader election;
- ``quarantine``: objects the current models cannot read, set aside by an upgrade.
"""

from __future__ import annotations

from sqlalchemy import select, text, update
from sqlalchemy.exc import DBAPIError

from virtplane.domain.resources import Secret
from virtplane.store import schema
from virtplane.store.audit import AuditLog
from virtplane.store.changes import Change, ChangeLog
from virtplane.store.creates import ObjectCreates
from virtplane.store.database import EventRecord, sqlite_url, utcnow
from virtplane.store.events import EventLog, event_from_row
from virtplane.store.leases import Leases
from virtplane.store.quarantine import QuarantineStore
from virtplane.store.sealing import PREFIX, Keyring, open_secret
from virtplane.store.tokens import Tokens
from virtplane.store.upgrade import (
    MIGRATIONS,
    UpgradeReport,
    head_revision,
    read_found,
    refuse_newer,
    upgrade_store,
)
from virtplane.store.writes import ObjectWrites

__all__ = [
    "MIGRATIONS",
    "Change",
    "EventRecord",
    "Store",
    "event_from_row",
    "head_revision",
    "sqlite_url",
    "utcnow",
]


class Store(ObjectWrites, ObjectCreates, ChangeLog, EventLog, Tokens, AuditLog, Leases, QuarantineStore):
    """All durable state. Construct with a SQLAlchemy URL, then call ``migrate()``."""

    def migrate(self) -> UpgradeReport:
        """Bring the store to this release (creates the schema on an empty database): the schema,
        the data migrations and the bodies in one transaction, after a backup
        (``virtplane.store.upgrade``); ``NewerData`` if a newer release wrote it, untouched.

        A schema at head already (every start but the first of a release) is known from one
        query, and Alembic is not loaded: it is a tenth of a second of a start-up, which a
        fleet coming back from an outage waits for."""
        return upgrade_store(self)

    def refuse_newer_data(self) -> None:
        """``NewerData`` if a newer release wrote this store; reads only. For a command that opens
        the store without upgrading it (``migrate`` does this first)."""
        with self.engine.connect() as connection:
            found = read_found(connection)
            connection.rollback()
        refuse_newer(found)

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
