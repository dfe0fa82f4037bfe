"""Table definitions (SQLAlchemy Core). Changes to them go through an Alembic migration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Column, DateTime, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

# Every resource kind lives in one table: the body is the resource as JSON, and the
# columns beside it are what the store itself must query or check atomically.
objects = Table(
    "objects",
    metadata,
    Column("kind", String(64), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("uid", String(36), nullable=False),
    Column("resource_version", Integer, nullable=False),
    Column("generation", Integer, nullable=False),
    Column("body", Text, nullable=False),
    # Selectable fields (virtplane.domain.selectors), each indexed with (kind, column, name).
    # The store writes them with the body (``field_values``, migration 0004; before it they were
    # columns the database generated from the body). An UPDATE names only the fields whose value
    # changed, so that a status write leaving phase and host alone touches none of the four
    # indexes (on SQLite a generated column's index was rewritten on every write of the body:
    # 29 us a write against 11, ``bench/``). Unbounded, so that no body can fail a write by a
    # value too long for its column.
    Column("status_phase", Text),
    Column("status_host", Text),
    Column("spec_run_policy", Text),
    Column("spec_vm", Text),
)
FIELD_PATHS: dict[str, tuple[str, str]] = {
    "status_phase": ("status", "phase"),
    "status_host": ("status", "host"),
    "spec_run_policy": ("spec", "run_policy"),
    "spec_vm": ("spec", "vm"),
}
"""Each field column and where its value is in an object's JSON document."""
for _column in FIELD_PATHS:
    Index(f"ix_objects_{_column}", objects.c.kind, objects.c[_column], objects.c.name)


def field_values(doc: Mapping[str, Any]) -> dict[str, str | None]:
    """The field columns of an object's JSON document: a string, or None where it has none."""
    values: dict[str, str | None] = {}
    for column, (part, field) in FIELD_PATHS.items():
        value = (doc.get(part) or {}).get(field)
        values[column] = None if value is None else str(value)
    return values


# One row per label of every object, kept by database triggers on ``objects`` (migration
# 0002), for label selectors. ``value_prefix`` is what the index holds: a label value may be
# longer than a PostgreSQL index entry allows.
object_labels = Table(
    "object_labels",
    metadata,
    Column("kind", String(64), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("key", String(320), primary_key=True),
    Column("value", Text, nullable=False),
    Column("value_prefix", String(200), nullable=False),
)
Index(
    "ix_object_labels_value",
    object_labels.c.kind,
    object_labels.c.key,
    object_labels.c.value_prefix,
    object_labels.c.name,
)
LABEL_PREFIX = 200

# The change feed: one row per write, its id is the store-wide revision that becomes
# the object's resource_version. Watchers read rows after the last revision they saw.
changes = Table(
    "changes",
    metadata,
    Column("revision", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(64), nullable=False),
    Column("name", String(255), nullable=False),
    Column("op", String(16), nullable=False),
)
Index("ix_changes_kind", changes.c.kind, changes.c.revision)

# Bookkeeping of the change feed: row "compacted" holds the highest revision compaction
# removed; a watch or a continue token from before it cannot be served.
feed_state = Table(
    "feed_state",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("revision", Integer, nullable=False),
)

# Append-only audit trail.
events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("time", DateTime(timezone=True), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("name", String(255), nullable=False),
    Column("type", String(16), nullable=False),
    Column("reason", String(128), nullable=False),
    Column("message", Text, nullable=False),
)
Index("ix_events_object", events.c.kind, events.c.name, events.c.id)

tokens = Table(
    "tokens",
    metadata,
    Column("token_sha256", String(64), primary_key=True),
    Column("name", String(255), nullable=False, unique=True),
    Column("role", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # the lifecycle (migration 0006): a revoked token's row stays, so that its 401 says why
    Column("description", Text, nullable=False, server_default=""),
    Column("owner", String(255)),
    Column("expires_at", DateTime(timezone=True)),
    Column("last_used_at", DateTime(timezone=True)),
    Column("revoked_at", DateTime(timezone=True)),
    Column("revoked_by", String(255)),
)

# Who wrote what, from where, when, with which outcome (``virtplane.store.audit``); pruned by settings.
audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("time", DateTime(timezone=True), nullable=False),
    Column("token", String(255)),
    Column("owner", String(255)),
    Column("client", String(255), nullable=False),
    Column("verb", String(32), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("name", String(255), nullable=False),
    Column("subresource", String(64), nullable=False),
    Column("fields", Text, nullable=False),
    Column("status", Integer, nullable=False),
    Column("reason", String(128), nullable=False),
)
Index("ix_audit_time", audit.c.time)
Index("ix_audit_object", audit.c.kind, audit.c.name, audit.c.id)

# Leader election for controllers when several replicas share a PostgreSQL store.
leases = Table(
    "leases",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

# Values an object holds alone (an address on a network, a MAC): the primary key makes
# two holders impossible, also between replicas; written in the holder's own transaction.
claims = Table(
    "claims",
    metadata,
    Column("scope", String(128), primary_key=True),
    Column("value", String(255), primary_key=True),
    Column("owner_kind", String(64), nullable=False),
    Column("owner_name", String(255), nullable=False),
    Column("owner_uid", String(36), nullable=False),
)
Index("ix_claims_owner", claims.c.owner_uid)

# Stored objects the current models could not read (``virtplane.store.quarantine``), out of
# ``objects`` so that the rest is served; their claims stay held until an admin deletes them.
quarantine = Table(
    "quarantine",
    metadata,
    Column("kind", String(64), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("uid", String(36), primary_key=True),
    Column("body", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("release", String(64), nullable=False),
    Column("quarantined_at", DateTime(timezone=True), nullable=False),
)

# Facts about the store itself: "release", the version that last upgraded it (``virtplane.store.upgrade``).
store_meta = Table(
    "store_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)
